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
  cache-from = ["type=gha"]
  cache-to   = ["type=gha,mode=max"]
}

target "service-dns" {
  inherits = ["_operator"]
  args     = { OPERATOR = "service-dns" }
  tags     = ["${REGISTRY}/flotilla-service-dns:${TAG}"]
}

target "config-copier" {
  inherits = ["_operator"]
  args     = { OPERATOR = "config-copier" }
  tags     = ["${REGISTRY}/flotilla-config-copier:${TAG}"]
}

target "pod-alert" {
  inherits = ["_operator"]
  args     = { OPERATOR = "pod-alert" }
  tags     = ["${REGISTRY}/flotilla-pod-alert:${TAG}"]
}

target "pod-debugger" {
  inherits = ["_operator"]
  args     = { OPERATOR = "pod-debugger" }
  tags     = ["${REGISTRY}/flotilla-pod-debugger:${TAG}"]
}

target "load-tester" {
  inherits = ["_operator"]
  args     = { OPERATOR = "load-tester" }
  tags     = ["${REGISTRY}/flotilla-load-tester:${TAG}"]
}

# The load-tester's runner (the workspace crate loadgen, not an operator).
target "loadgen" {
  inherits = ["_operator"]
  args     = { OPERATOR = "loadgen" }
  tags     = ["${REGISTRY}/flotilla-loadgen:${TAG}"]
}

group "default" {
  targets = ["service-dns", "config-copier", "pod-alert", "pod-debugger", "load-tester", "loadgen"]
}
