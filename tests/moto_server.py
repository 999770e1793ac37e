"""moto's server, with each DynamoDB request handled whole before the next.

moto checks a ConditionExpression and then writes, in separate steps, on whichever
server thread the request landed: two concurrent conditional writes to one item can
both succeed. DynamoDB makes each conditional write atomic, and nodewright's leases
depend on it (two provisioner invocations at once must not both hold the lease), so
the emulator is made to behave as DynamoDB does. Other services run concurrently as
moto runs them. Arguments are moto_server's.
"""

import sys
import threading

from moto.moto_server.werkzeug_app import DomainDispatcherApplication
from moto.server import main

_dynamodb = threading.Lock()
_dispatch = DomainDispatcherApplication.__call__


def _dispatch_dynamodb_one_at_a_time(self, environ, start_response):
    if environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB_"):
        with _dynamodb:
            # The body is built inside the call (Flask returns it whole).
            return list(_dispatch(self, environ, start_response))
    return _dispatch(self, environ, start_response)


DomainDispatcherApplication.__call__ = _dispatch_dynamodb_one_at_a_time

if __name__ == "__main__":
    sys.exit(main())
