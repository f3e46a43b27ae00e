// Wrapper module that builds CoreDNS, the cluster DNS of the test bed's node, at the
// release Kubernetes 1.33 ships with.
module gw.dev/test-bins/coredns

go 1.22.7

require github.com/coredns/coredns v1.12.0
