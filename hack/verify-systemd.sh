#!/usr/bin/env bash
# Checks deploy/systemd/ (run by hack/test.sh):
#   - `systemd-analyze verify` on every unit and on Debian's containerd.service with our
#     drop-in, in a temporary root that holds the units where an install puts them, the
#     example EnvironmentFiles, stand-ins for the ExecStart binaries and the system's own
#     units. Any diagnostic fails the check (systemd-analyze exits 0 on unknown keys and
#     unparsable values, so its output is what counts);
#   - each example env file defines the variable its unit's ExecStart expands, as flags;
#   - sysctl.d and modules-load.d files are well formed.
# When a built binary's --help is at hand, flags in the env files it does not list are
# reported (a note, not a failure: the binary may be older than the env file).
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=deploy/systemd
fail=0
bad() { printf 'verify-systemd: %s\n' "$*" >&2; fail=1; }

command -v systemd-analyze >/dev/null || { echo "verify-systemd: systemd-analyze not found (apt-get install systemd)" >&2; exit 1; }

ROOT=$(mktemp -d)
trap 'rm -rf "$ROOT"' EXIT
mkdir -p "$ROOT/etc/systemd/system" "$ROOT/usr/lib/systemd" "$ROOT/etc/ferrokube" \
  "$ROOT/etc/default" "$ROOT/usr/local/bin" "$ROOT/usr/bin" "$ROOT/sbin"
# The system's units (targets the units order against; Debian's containerd.service).
for d in /lib/systemd/system /usr/lib/systemd/system; do
  if [ -d "$d" ]; then cp -a "$d" "$ROOT/usr/lib/systemd/"; break; fi
done
if [ ! -f "$ROOT/usr/lib/systemd/system/containerd.service" ]; then
  mkdir -p "$ROOT/usr/lib/systemd/system"
  printf '[Unit]\nDescription=containerd\n[Service]\nExecStart=/usr/bin/containerd\n' \
    >"$ROOT/usr/lib/systemd/system/containerd.service"
fi
stub() { printf '#!/bin/sh\nexit 0\n' >"$ROOT$1"; chmod 0755 "$ROOT$1"; }

units=()
for unit in "$DIR"/*.service; do
  name=$(basename "$unit")
  units+=("$name")
  cp "$unit" "$ROOT/etc/systemd/system/$name"
  # Stand-ins for the binaries the unit starts.
  while read -r exe; do
    mkdir -p "$ROOT$(dirname "$exe")"
    stub "$exe"
  done < <(sed -n 's/^Exec[A-Za-z]*=[-@:+!]*\(\/[^ ]*\).*/\1/p' "$unit")
  # The EnvironmentFile it names, from deploy/systemd/env/, must define the variable its
  # ExecStart expands, as a list of --flags.
  envfile=$(sed -n 's/^EnvironmentFile=-\{0,1\}//p' "$unit" | head -n 1)
  var=$(sed -n 's/^ExecStart=.*\$\([A-Z_]*\).*/\1/p' "$unit" | head -n 1)
  if [ -n "$envfile" ]; then
    example=$DIR/env/$(basename "$envfile")
    if [ ! -f "$example" ]; then
      bad "$name: no example $example for EnvironmentFile=$envfile"
      continue
    fi
    cp "$example" "$ROOT$envfile"
    if [ -n "$var" ]; then
      # shellcheck disable=SC2016 # expanded by the inner bash
      value=$(env -i bash -c 'set -a; . "$1"; printf "%s" "${!2:-}"' _ "$example" "$var")
      [ -n "$value" ] || bad "$example does not define $var (used by $name)"
      for word in $value; do
        [[ $word == --* ]] || bad "$example: $var holds '$word', not a --flag"
      done
      # Flags the built binary does not list (a note only).
      bin=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$unit")
      for built in "${CARGO_TARGET_DIR:-/var/cache/ferrokube/target}"/{release,debug}/"$(basename "$bin")"; do
        [ -x "$built" ] || continue
        help=$("$built" --help 2>&1 || true)
        grep -q -- '--' <<<"$help" || continue
        for word in $value; do
          f=${word%%=*}
          grep -qE -- "(^|[[:space:],])$f([[:space:]=,<[]|$)" <<<"$help" \
            || echo "verify-systemd: note: $built --help does not list $f ($example)" >&2
        done
        break
      done
    fi
  fi
done

# Debian's containerd.service with our drop-in.
mkdir -p "$ROOT/etc/systemd/system/containerd.service.d"
cp "$DIR"/containerd.service.d/*.conf "$ROOT/etc/systemd/system/containerd.service.d/"
stub /usr/bin/containerd
stub /sbin/modprobe
units+=(containerd.service)

out=$(cd "$ROOT/etc/systemd/system" &&
  SYSTEMD_LOG_COLOR=0 systemd-analyze verify --root="$ROOT" --man=no --generators=no "${units[@]}" 2>&1) || {
  bad "systemd-analyze verify failed"
}
if [ -n "$out" ]; then
  printf '%s\n' "$out" | sed "s|$ROOT||g" >&2
  bad "systemd-analyze verify reported the problems above"
fi

# sysctl.d: `key = value` lines; modules-load.d: one module name per line.
for f in "$DIR"/sysctl.d/*.conf; do
  while IFS= read -r line; do
    [[ $line =~ ^[[:space:]]*([#;].*)?$ ]] && continue
    [[ $line =~ ^[a-z0-9_.-]+[[:space:]]*=[[:space:]]*[^[:space:]]+$ ]] || bad "$f: bad line: $line"
  done <"$f"
done
for f in "$DIR"/modules-load.d/*.conf; do
  while IFS= read -r line; do
    [[ $line =~ ^[[:space:]]*([#;].*)?$ ]] && continue
    [[ $line =~ ^[A-Za-z0-9_-]+$ ]] || bad "$f: bad line: $line"
  done <"$f"
done

[ $fail -eq 0 ] || exit 1
echo "verify-systemd: ${#units[@]} units OK (${units[*]})"
