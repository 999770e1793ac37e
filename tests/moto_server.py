"""moto's server, made to behave as AWS does where nodewright depends on it.

Each DynamoDB request is handled whole before the next:

moto checks a ConditionExpression and then writes, in separate steps, on whichever
server thread the request landed: two concurrent conditional writes to one item can
both succeed. DynamoDB makes each conditional write atomic, and nodewright's leases
depend on it (two provisioner invocations at once must not both hold the lease), so
the emulator is made to behave as DynamoDB does. Other services run concurrently as
moto runs them.

An instance CreateFleet launches carries its launch template's security groups, as
EC2 gives them: moto reads the groups from a field launch templates do not have, so
it gives a spot instance the VPC's default group and an on-demand one none, and every
node launched through it would read as drifted from its EC2NodeClass's groups.

CreateFleet answers an override whose subnet has no free address with EC2's
`InsufficientFreeAddressesInSubnet` entry in `Errors` (moto launches into it anyway).

Arguments are moto_server's.
"""

import sys
import threading

import uuid

from moto.core.responses import ActionResult
from moto.ec2.models.fleets import Fleet
from moto.ec2.responses.fleets import Fleets
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

_create_fleet = Fleet.__init__


def _launch_template_groups(backend, launch_spec):
    """The security groups (ids) of the launch template version a fleet launch used."""
    spec = getattr(launch_spec, "launch_template_spec", None) or {}
    if "LaunchTemplateId" not in spec:
        return []
    template = backend.get_launch_template(template_id=spec["LaunchTemplateId"])
    data = template.get_version(
        spec.get("Version", template.default_version_number)
    ).data
    groups = list(data.get("SecurityGroupIds") or data.get("SecurityGroups") or [])
    for interface in data.get("NetworkInterfaces") or []:
        groups.extend(interface.get("Groups") or [])
    return groups


def _create_fleet_with_launch_template_groups(self, ec2_backend, *args, **kwargs):
    _create_fleet(self, ec2_backend, *args, **kwargs)
    launched = [(i["instance"], i.get("launch_spec")) for i in self.on_demand_instances]
    launched += [
        (r.instance, r.launch_spec)
        for r in self.spot_requests
        if getattr(r, "instance", None) is not None
    ]
    for instance, launch_spec in launched:
        groups = _launch_template_groups(ec2_backend, launch_spec)
        if groups:
            instance.security_groups = [
                ec2_backend.get_security_group_by_name_or_id(g) for g in groups
            ]


Fleet.__init__ = _create_fleet_with_launch_template_groups

_create_fleet_response = Fleets.create_fleet


def _create_fleet_where_subnets_have_addresses(self):
    configs = self._get_param("LaunchTemplateConfigs", []) or []
    lifecycle = (
        self._get_param("TargetCapacitySpecification", {}) or {}
    ).get("DefaultTargetCapacityType", "on-demand")
    errors = []
    # moto counts a subnet's free addresses over every network interface it holds:
    # once per subnet and call.
    free = {}
    for config in configs:
        kept = []
        for override in config.get("Overrides") or []:
            subnet_id = override.get("SubnetId")
            if subnet_id and subnet_id not in free:
                free[subnet_id] = self.ec2_backend.get_subnet(
                    subnet_id
                ).available_ip_address_count
            if subnet_id and free[subnet_id] <= 0:
                errors.append(
                    {
                        "LaunchTemplateAndOverrides": {
                            "LaunchTemplateSpecification": config[
                                "LaunchTemplateSpecification"
                            ],
                            "Overrides": override,
                        },
                        "Lifecycle": lifecycle,
                        "ErrorCode": "InsufficientFreeAddressesInSubnet",
                        "ErrorMessage": f"There are not enough free addresses in subnet '{subnet_id}' to satisfy the requested number of instances.",
                    }
                )
            else:
                kept.append(override)
        config["Overrides"] = kept
    if not errors:
        return _create_fleet_response(self)
    if not any(config["Overrides"] for config in configs):
        # Nothing left to launch (moto would launch the template without a subnet).
        return ActionResult(
            {"FleetId": f"fleet-{uuid.uuid4()}", "Instances": [], "Errors": errors}
        )
    answer = _create_fleet_response(self)
    answer.result.setdefault("Errors", []).extend(errors)
    return answer


Fleets.create_fleet = _create_fleet_where_subnets_have_addresses

if __name__ == "__main__":
    sys.exit(main())
