// Wrapper module that builds etcd's server at the release k8s 1.32 pins; etcd's own module
// carries local replaces that `go install` refuses, but they are ignored in a dependency.
module gw.dev/test-bins/etcd

go 1.23.0

require go.etcd.io/etcd/server/v3 v3.5.16
