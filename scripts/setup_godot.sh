#!/usr/bin/env bash
# Installs Godot 4 (headless-capable) without touching the system: Debian 12 ships only Godot 3,
# so the `godot` package of Debian's sid suite and its dependency closure are downloaded with a
# private apt state and unpacked into a private sysroot under a cache folder outside the repo;
# the binary then starts through that sysroot's own dynamic loader (it needs a newer glibc).
# Idempotent: a second run only checks that the binary starts. Prints the command that runs it
# on stdout (last line); everything else goes to stderr.
#
#   GODOT_CACHE=~/.cache/geist/godot   where to install (default)
#   scripts/setup_godot.sh              -> prints e.g. "/root/.cache/geist/godot/godot"
set -euo pipefail

R=${GODOT_CACHE:-$HOME/.cache/geist/godot}
S=$R/sysroot
WRAP=$R/godot

if [ -x "$WRAP" ] && "$WRAP" --headless --version >/dev/null 2>&1; then
    echo "[setup_godot] Godot $("$WRAP" --headless --version 2>/dev/null | tail -n1) at $WRAP" >&2
    echo "$WRAP"
    exit 0
fi

mkdir -p "$R/apt/lists/partial" "$R/apt/cache/archives/partial" "$R/debs" "$S"
SRC=/etc/apt/sources.list.d/debian.sources
URI=""
if [ -f "$SRC" ]; then
    URI=$(awk '/^URIs:/{print $2; exit}' "$SRC")
fi
if [ -z "$URI" ] && [ -f /etc/apt/sources.list ]; then
    URI=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list)
fi
URI=${URI:-http://deb.debian.org/debian}
echo "deb $URI sid main" >"$R/apt/sources.list"
o=(-oDir::State::Lists="$R/apt/lists" -oDir::Etc::SourceList="$R/apt/sources.list"
   -oDir::Etc::SourceParts=/nonexistent -oDir::Cache="$R/apt/cache"
   -oDebug::NoLocking=1)

echo "[setup_godot] resolving the godot package of Debian sid from $URI" >&2
apt-get "${o[@]}" update >&2
# Resolve the closure each time: sid renames packages over time.
apt-cache "${o[@]}" depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances godot | grep -v '^ ' | grep -v '^<' | sort -u >"$R/pkgs"
echo "[setup_godot] downloading $(wc -l <"$R/pkgs") packages" >&2
(cd "$R/debs" && apt-get "${o[@]}" download $(cat "$R/pkgs") >&2)
for f in "$R"/debs/*.deb; do dpkg -x "$f" "$S"; done

cat >"$WRAP" <<EOF
#!/bin/sh
# Starts the Godot of the private sysroot through its own loader (written by setup_godot.sh).
S="$S"
exec "\$S/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" \\
  --library-path "\$S/usr/lib/x86_64-linux-gnu:\$S/usr/lib/x86_64-linux-gnu/pulseaudio" \\
  "\$S/usr/bin/godot" "\$@"
EOF
chmod +x "$WRAP"
if ! "$WRAP" --headless --version >&2; then
    echo "[setup_godot] Godot was unpacked but does not start" >&2
    exit 1
fi
echo "[setup_godot] Godot installed at $WRAP" >&2
echo "$WRAP"
