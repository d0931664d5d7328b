#!/usr/bin/env bash
# check_pipefail_grep.sh ROOT: fails when a shell script under ROOT that sets pipefail reads a pipe
# with `grep -q`. grep -q exits at its first match; the writer then dies of SIGPIPE, pipefail makes
# the whole pipeline fail, and the check reads "no match" although the line is there (a flaky
# false failure, or a false pass under `!`). Use `grep -q PAT <<<"$var"` instead.
# check_pipefail_grep.sh --selftest: the check must catch a sample and pass its fixed form.
set -uo pipefail
scan() {
  local root=$1 found=0 f
  while IFS= read -r -d '' f; do
    [[ $f == *.sh || "$(head -n1 "$f" 2>/dev/null | tr -d '\0')" =~ ^\#!.*sh ]] || continue
    grep -q 'pipefail' "$f" || continue
    # a pipe into grep whose options hold q (-q, -Eq, -qF, --quiet), code lines only
    if grep -nE '\|[[:space:]]*grep([[:space:]]+-[A-Za-z]*q|[[:space:]]+--quiet|[[:space:]]+-[A-Za-z]+[[:space:]]+-[A-Za-z]*q)' "$f" |
      grep -vE '^[0-9]+:[[:space:]]*#' >"${TMPDIR:-/tmp}/pfg.$$"; then
      sed "s|^|$f:|" "${TMPDIR:-/tmp}/pfg.$$"
      found=1
    fi
  done < <(find "$root" \( -name .git -o -name 'build*' -o -name third_party \) -prune -o -type f \
    \( -name '*.sh' -o -perm -u+x \) -print0)
  rm -f "${TMPDIR:-/tmp}/pfg.$$"
  return "$found"
}
if [ "${1:-}" = --selftest ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  printf '#!/usr/bin/env bash\nset -o pipefail\nprintf "%%s\\n" "$x" | g''rep -Eq -- "$p" || exit 1\n' >"$tmp/bad.sh"
  if scan "$tmp" >/dev/null; then
    echo "check_pipefail_grep passed a script that pipes into grep -Eq under pipefail" >&2
    exit 1
  fi
  printf '#!/usr/bin/env bash\nset -o pipefail\ngrep -Eq -- "$p" <<<"$x" || exit 1\n' >"$tmp/bad.sh"
  scan "$tmp" || { echo "check_pipefail_grep flagged the here-string form" >&2; exit 1; }
  echo "check_pipefail_grep: catches the pipe, passes the here-string"
  exit 0
fi
root=${1:?usage: check_pipefail_grep.sh ROOT | --selftest}
if ! scan "$root"; then
  echo "check_pipefail_grep: the lines above pipe into grep -q under pipefail (SIGPIPE makes them fail at random); use grep -q PAT <<<\"\$var\"" >&2
  exit 1
fi
echo "check_pipefail_grep: no pipe into grep -q under pipefail"
