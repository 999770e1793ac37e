package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
)

// caTransport trusts the control plane's CA only.
func caTransport(caFile string) (http.RoundTripper, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no certificate", caFile)
	}
	return &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, nil
}

// insecureTransport is for the health endpoints of kube-controller-manager and
// kube-scheduler, which serve a self-signed certificate of their own making.
func insecureTransport() http.RoundTripper {
	return &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
}
