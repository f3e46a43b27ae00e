// Wrapper module that builds the Helm 3 client at a pinned release; a go.sum here pins the
// bytes of every module it pulls, which `go install pkg@version` would not.
module gw.dev/test-bins/helm

go 1.24.0

require helm.sh/helm/v3 v3.18.6
