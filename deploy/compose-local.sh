#!/usr/bin/env bash
# deploy/compose.yaml with podman-compose on a machine that reaches no container
# registry: builds presa's image (deploy/image.sh) and Redis and nginx images
# from this machine's Debian packages (deploy/local-images.sh), then runs
# podman-compose with those images.
#
# Usage:
#   deploy/compose-local.sh [COMPOSE ARGS...]     default: up -d
#   deploy/compose-local.sh -f deploy/compose.jwt.yaml up -d   (extra -f files come first)
#   deploy/compose-local.sh down -v
#
# Environment: everything deploy/compose.yaml reads (PRESA_PORT, PRESA_LEASE_MS, …);
# PRESA_IMAGE / REDIS_IMAGE / NGINX_IMAGE skip building that image;
# IMAGE_PROFILE (dist|release, default dist) for deploy/image.sh; COMPOSE_PROJECT
# (default presa) names the project, so two stacks can run side by side.
# Needs podman (apt-get install podman runc) and podman-compose (pip install podman-compose).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
command -v podman-compose >/dev/null || { echo "podman-compose not found (pip install podman-compose)" >&2; exit 1; }

FILES=(-f "$REPO/deploy/compose.yaml")
while [ "${1:-}" = -f ]; do FILES+=(-f "$2"); shift 2; done
[ $# -gt 0 ] || set -- up -d

if [ "$1" = up ]; then
  if [ -z "${PRESA_IMAGE:-}" ]; then
    PRESA_IMAGE=$("$REPO/deploy/image.sh" --profile "${IMAGE_PROFILE:-dist}" | tail -n1)
  fi
  [ -n "${REDIS_IMAGE:-}" ] || REDIS_IMAGE=$("$REPO/deploy/local-images.sh" redis | tail -n1)
  [ -n "${NGINX_IMAGE:-}" ] || NGINX_IMAGE=$("$REPO/deploy/local-images.sh" nginx | tail -n1)
fi
export PRESA_IMAGE=${PRESA_IMAGE:-localhost/presa:dev} REDIS_IMAGE=${REDIS_IMAGE:-localhost/redis-local:7} \
  NGINX_IMAGE=${NGINX_IMAGE:-localhost/nginx-local:1}
# Never build from compose's `build:` section here: the images above are the ones to run.
[ "$1" = up ] && set -- up --no-build "${@:2}"
exec podman-compose -p "${COMPOSE_PROJECT:-presa}" "${FILES[@]}" "$@"
