# docker buildx bake                     every operator image, both platforms
# docker buildx bake service-dns         one operator
# REGISTRY=ghcr.io/me TAG=0.1.0 docker buildx bake --push
#
# A test (`cargo xtask test`) checks that every crate in operators/ has a
# target here and that the file parses (`buildx bake --print`).

variable "REGISTRY" {
  default = "ghcr.io/flotilla-dev"
}

variable "TAG" {
  default = "dev"
}

variable "REVISION" {
  default = "unknown"
}

# Shared settings of every operator image.
target "_operator" {
  context    = "."
  dockerfile = "Dockerfile"
  platforms  = ["linux/amd64", "linux/arm64"]
  args = {
    VERSION  = "${TAG}"
    REVISION = "${REVISION}"
  }
}

# Each image has its own GitHub Actions cache scope: with one shared scope
# every image's export overwrites the previous one's and the next build
# starts cold. (The cargo registry and target cache mounts stay in the
# builder, one target directory per TARGETARCH; see the Dockerfile.)
target "service-dns" {
  inherits   = ["_operator"]
  args       = { OPERATOR = "service-dns" }
  tags       = ["${REGISTRY}/flotilla-service-dns:${TAG}"]
  cache-from = ["type=gha,scope=service-dns"]
  cache-to   = ["type=gha,scope=service-dns,mode=max"]
}

target "config-copier" {
  inherits   = ["_operator"]
  args       = { OPERATOR = "config-copier" }
  tags       = ["${REGISTRY}/flotilla-config-copier:${TAG}"]
  cache-from = ["type=gha,scope=config-copier"]
  cache-to   = ["type=gha,scope=config-copier,mode=max"]
}

target "pod-alert" {
  inherits   = ["_operator"]
  args       = { OPERATOR = "pod-alert" }
  tags       = ["${REGISTRY}/flotilla-pod-alert:${TAG}"]
  cache-from = ["type=gha,scope=pod-alert"]
  cache-to   = ["type=gha,scope=pod-alert,mode=max"]
}

target "pod-debugger" {
  inherits   = ["_operator"]
  args       = { OPERATOR = "pod-debugger" }
  tags       = ["${REGISTRY}/flotilla-pod-debugger:${TAG}"]
  cache-from = ["type=gha,scope=pod-debugger"]
  cache-to   = ["type=gha,scope=pod-debugger,mode=max"]
}

target "load-tester" {
  inherits   = ["_operator"]
  args       = { OPERATOR = "load-tester" }
  tags       = ["${REGISTRY}/flotilla-load-tester:${TAG}"]
  cache-from = ["type=gha,scope=load-tester"]
  cache-to   = ["type=gha,scope=load-tester,mode=max"]
}

# The load-tester's runner (the workspace crate loadgen, not an operator).
target "loadgen" {
  inherits   = ["_operator"]
  args       = { OPERATOR = "loadgen" }
  tags       = ["${REGISTRY}/flotilla-loadgen:${TAG}"]
  cache-from = ["type=gha,scope=loadgen"]
  cache-to   = ["type=gha,scope=loadgen,mode=max"]
}

group "default" {
  targets = ["service-dns", "config-copier", "pod-alert", "pod-debugger", "load-tester", "loadgen"]
}
