# Sourced by hack/envtest.sh and hack/kube-scheduler.sh: build one command of
# k8s.io/kubernetes (kube-apiserver, kube-scheduler) at $K8S_VERSION.
#
# k8s.io/kubernetes cannot be `go install`ed (its go.mod replaces every staging module with
# a local path), so the command is built through a wrapper module that requires
# k8s.io/kubernetes and pins each staging module to its published v0.x twin, with the
# version stamped in as a release build would.
#
#   k8s_build_command <wrapper module name> <main.go source> <output binary>
#
# Needs go on PATH, GOFLAGS=-mod=mod and $K8S_VERSION; writes the binary atomically.

k8s_build_command() {
  local module="$1" main_go="$2" output="$3"
  local dir kmod staging_version minor ldflags="" pkg
  dir="$(mktemp -d)"
  staging_version="v0.${K8S_VERSION#v1.}"
  minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  # The staging modules are the replace targets of k8s.io/kubernetes' own go.mod.
  kmod="$(go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')"
  if [[ ! -f "$kmod" ]]; then
    echo "could not download k8s.io/kubernetes@${K8S_VERSION}" >&2
    rm -rf "$dir"
    return 1
  fi
  {
    echo "module $module"
    echo
    echo "go $(sed -n 's/^go \(.*\)/\1/p' "$kmod")"
    echo
    echo "require k8s.io/kubernetes ${K8S_VERSION}"
    echo
    echo "replace ("
    grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging/src/k8s\.io/[a-z0-9-]+' "$kmod" \
      | awk -v v="$staging_version" '{print "\t" $1 " => " $1 " " v}'
    echo ")"
  } >"$dir/go.mod"
  printf '%s\n' "$main_go" >"$dir/main.go"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X ${pkg}.gitVersion=${K8S_VERSION} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor} -X ${pkg}.gitTreeState=clean"
  done
  if ! (cd "$dir" && go mod tidy >&2 && go build -trimpath -ldflags "-s -w${ldflags}" -o "$output.tmp" . >&2); then
    rm -rf "$dir"
    return 1
  fi
  mv "$output.tmp" "$output"
  rm -rf "$dir"
}
