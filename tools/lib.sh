# Sourced by the shell tools in tools/: what their command lines share.
# shellcheck shell=bash

# Prints the calling script's header comment (from its second line up to
# `set -euo pipefail`) without the comment marks: the script's --help.
usage() { sed -n '2,/^set -euo pipefail/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

# die MESSAGE...: the message on stderr, after the script's name; exit 2
# (bad usage or a missing prerequisite).
die() {
  echo "$(basename "$0"): $*" >&2
  exit 2
}
