#!/usr/bin/env bash
# The browser check of `./ab view` pages (docs/sched-view.md): headless Chromium (Debian
# package `chromium`, installed with apt-get when missing and running as root) loads each
# page with a node selected, and the check passes when the page's script finished
# (body data-ready="1"), saw no uncaught error (data-errors="0", and no "Uncaught" in the
# browser's console log), shows at least one overview layout (data-overviews >= 1) and the
# detail of the selected node (data-detail = that node). A screenshot of each is written.
#
# usage: browser-check.sh OUT_DIR PAGE.html[#HASH]...
#   HASH selects what the page shows, e.g. `node=12`, `q=mask&node=1`, `side=b&node=3`; it
#   must name a node (node=N or leaf=N). Screenshots: OUT_DIR/<page name>.png (1400x1100).
set -uo pipefail
out=${1:?usage: browser-check.sh OUT_DIR PAGE.html#node=N ...}; shift
[ $# -gt 0 ] || { echo "usage: browser-check.sh OUT_DIR PAGE.html#node=N ..." >&2; exit 2; }
# Debian packages: chromium (the browser), pngquant (keeps the screenshots small).
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v pngquant >/dev/null 2>&1 || missing+=(pngquant)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[view-check] installing ${missing[*]}" >&2
    apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2 || exit 1
  else
    echo "[view-check] missing: sudo apt-get install -y ${missing[*]}" >&2; exit 1
  fi
fi
mkdir -p "$out"
# Chromium wants a writable profile and no sandbox as root in a container.
prof=$(mktemp -d); trap 'rm -rf "$prof"' EXIT
chrome=(chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$prof"
        --no-first-run --disable-extensions --enable-logging=stderr --v=0)
pass=0; fail=0
for arg in "$@"; do
  page=${arg%%#*}; hash=${arg#"$page"}; hash=${hash#\#}
  want=$(sed -n 's/.*\b\(node\|leaf\)=\([0-9]*\).*/\1:\2/p' <<<"$hash")
  name=$(basename "$page" .html)
  url="file://$(readlink -f "$page")${hash:+#$hash}"
  log=${page%.html}.console.log
  dom=$(timeout 120 "${chrome[@]}" --dump-dom "$url" 2>"$log")
  body=$(grep -o '<body[^>]*>' <<<"$dom" | head -1)
  attr() { sed -n "s/.* $1=\"\([^\"]*\)\".*/\1/p" <<<"$body"; }
  ready=$(attr data-ready); errs=$(attr data-errors); ovs=$(attr data-overviews); det=$(attr data-detail)
  ms=$(attr data-render-ms); list_ms=$(attr data-list-ms)
  uncaught=$(grep -c 'Uncaught' "$log")
  timeout 120 "${chrome[@]}" --window-size=1400,1100 --screenshot="$out/$name.png" "$url" 2>>"$log" >/dev/null
  [ -f "$out/$name.png" ] && pngquant --force --quality=60-90 --speed 3 --output "$out/$name.png" "$out/$name.png" 2>>"$log"
  png=$( [ -f "$out/$name.png" ] && stat -c %s "$out/$name.png" || echo 0)
  if [ "$ready" = 1 ] && [ "$errs" = 0 ] && [ "$uncaught" = 0 ] && [ "${ovs:-0}" -ge 1 ] \
     && [ -n "$want" ] && [ "$det" = "$want" ] && [ "$png" -gt 0 ]; then
    echo "[view-check] PASS $name: ready in ${ms} ms (node list ${list_ms} ms), 0 errors, $ovs overview(s), detail of $det, screenshot $out/$name.png ($((png / 1024)) KiB)"
    pass=$((pass + 1))
  else
    echo "[view-check] FAIL $name: ready=$ready errors=$errs uncaught=$uncaught overviews=$ovs detail=$det (wanted $want) png=$png (console: $log)"
    fail=$((fail + 1))
  fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
