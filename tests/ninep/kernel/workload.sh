#!/bin/sh
# Filesystem workload against a 9P mount; prints "RESULT <step> ok|fail <detail>" per step.
# usage: sh workload.sh MOUNTPOINT rw|ro|bench   (sizes come from /config.env, the ro manifest from /manifest)
M=$1
MODE=$2
BIG_MB=16 SMALL_N=100 DIR_N=300
. /config.env
W=$M/workload

die() { echo "$*"; exit 1; }
same() { [ "$1" = "$2" ] || die "$3: got '$1', want '$2'"; }
sha() { sha256sum < "$1" | cut -d' ' -f1; }
step() {
  name=$1; shift
  detail=$( (set -e; "$@") 2>&1 )
  if [ $? -eq 0 ]; then echo "RESULT $name ok $detail"; else echo "RESULT $name fail $(echo "$detail" | tr '\n' ' ')"; fi
}
refused() { if "$@" 2>/dev/null; then die "succeeded on a read-only export: $*"; fi; }

big_file() {
  head -c $((BIG_MB * 1048576)) /dev/urandom > /tmp/big
  want=$(sha /tmp/big)
  dd if=/tmp/big of="$W/big" bs=1M conv=fsync 2>/dev/null
  rm /tmp/big
  same "$(stat -c %s "$W/big")" $((BIG_MB * 1048576)) size
  sync; echo 3 > /proc/sys/vm/drop_caches
  same "$(sha "$W/big")" "$want" sha256
  echo "sha256=$want"
}
small_files() {
  mkdir "$W/small"
  i=0; while [ $i -lt $SMALL_N ]; do echo "small $i" > "$W/small/f$i"; i=$((i + 1)); done
  i=0; while [ $i -lt $SMALL_N ]; do
    read -r line < "$W/small/f$i"; same "$line" "small $i" "content f$i"
    same "$(stat -c %s "$W/small/f$i")" "$((7 + ${#i}))" "size f$i"
    i=$((i + 1))
  done
  i=0; while [ $i -lt $SMALL_N ]; do rm "$W/small/f$i"; i=$((i + 1)); done
  same "$(ls -A "$W/small" | wc -l)" 0 "left after unlink"
  rmdir "$W/small"
}
many_entries() {
  mkdir "$W/many"
  i=0; while [ $i -lt $DIR_N ]; do : > "$W/many/entry-$i"; i=$((i + 1)); done
  same "$(ls -a "$W/many" | wc -l)" $((DIR_N + 2)) "entries with . and .."
  ls "$W/many" | sort > /tmp/got
  i=0; while [ $i -lt $DIR_N ]; do echo "entry-$i"; i=$((i + 1)); done | sort > /tmp/want
  cmp -s /tmp/got /tmp/want || die "names differ"
  rm -r "$W/many"
  [ ! -e "$W/many" ] || die "rm -r left the directory"
}
renames() {
  echo one > "$W/r1"; mv "$W/r1" "$W/r2"; [ ! -e "$W/r1" ] || die "old name remains"
  same "$(cat "$W/r2")" one same_dir
  mkdir -p "$W/rd/inner"; echo deep > "$W/rd/inner/x"; mv "$W/rd" "$W/renamed-dir"
  same "$(cat "$W/renamed-dir/inner/x")" deep dir_rename
  echo two > "$W/r3"; mv "$W/r3" "$W/r2"; same "$(cat "$W/r2")" two overwrite
}
symlinks() {
  ln -s r2 "$W/link"; same "$(readlink "$W/link")" r2 readlink; same "$(cat "$W/link")" two follow
  ln -s nowhere "$W/dangling"; same "$(stat -c %F "$W/dangling")" "symbolic link" type
}
edits() {
  printf 'abc' > "$W/e"; printf 'def' >> "$W/e"; same "$(cat "$W/e")" abcdef append
  truncate -s 2 "$W/e"; same "$(cat "$W/e")" ab truncate
  chmod 0640 "$W/e"; same "$(stat -c %a "$W/e")" 640 chmod
  touch -t 200102030405.06 "$W/e"; same "$(stat -c %Y "$W/e")" 981173106 mtime
  if cat "$W/missing" 2>/dev/null; then die "read of a missing file succeeded"; fi
}
escape() {
  ln -s / "$W/to-root"
  [ -e "$W/to-root/GUEST_ROOT_MARKER" ] || die "absolute symlink was not resolved inside the guest"
  ln -s ../../../../../../.. "$W/up"
  [ -e "$W/up/GUEST_ROOT_MARKER" ] || die "relative symlink was not resolved inside the guest"
}

ro_manifest() {
  n=0
  while read -r path want; do
    same "$(sha "$M/$path")" "$want" "$path"; n=$((n + 1))
  done < /manifest
  echo "files=$n"
}
ro_refusals() {
  f=$M/$(head -n 1 /manifest | cut -d' ' -f1)
  refused sh -c ": > '$M/new-file'"
  refused mkdir "$M/new-dir"
  refused ln -s x "$M/new-link"
  refused sh -c "printf x >> '$f'"
  refused truncate -s 0 "$f"
  refused chmod 0600 "$f"
  refused touch -t 200001010000 "$f"
  refused mv "$f" "$M/moved"
  refused rm "$f"
  [ ! -e "$M/new-file" ] && [ ! -e "$M/new-dir" ] || die "a refused change is visible"
}
ro_escape() {
  [ -L "$M/to-root" ] || die "to-root is not reported as a symlink"
  [ -e "$M/to-root/GUEST_ROOT_MARKER" ] || die "absolute symlink was resolved on the server"
}

# timings for bench/ninep.py, in milliseconds (10 ms resolution)
now_ms() { read -r up _ < /proc/uptime; echo $(( ${up%.*} * 1000 + 1${up#*.}0 - 1000 )); }
bench() {
  head -c $((BIG_MB * 1048576)) /dev/urandom > /tmp/big
  t0=$(now_ms); dd if=/tmp/big of="$W/big" bs=1M conv=fsync 2>/dev/null; t1=$(now_ms)
  rm /tmp/big; sync; echo 3 > /proc/sys/vm/drop_caches
  t2=$(now_ms); dd if="$W/big" of=/dev/null bs=1M 2>/dev/null; t3=$(now_ms)
  rm "$W/big"; mkdir "$W/small"
  t4=$(now_ms); i=0; while [ $i -lt $SMALL_N ]; do echo "small $i" > "$W/small/f$i"; i=$((i + 1)); done
  t5=$(now_ms); i=0; while [ $i -lt $SMALL_N ]; do read -r line < "$W/small/f$i"; i=$((i + 1)); done
  t6=$(now_ms); i=0; while [ $i -lt $SMALL_N ]; do [ -f "$W/small/f$i" ]; i=$((i + 1)); done
  t7=$(now_ms); i=0; while [ $i -lt $SMALL_N ]; do rm "$W/small/f$i"; i=$((i + 1)); done
  t8=$(now_ms); rm -r "$W"
  echo "mb=$BIG_MB n=$SMALL_N write_ms=$((t1 - t0)) read_ms=$((t3 - t2)) create_ms=$((t5 - t4))" \
    "read_small_ms=$((t6 - t5)) stat_ms=$((t7 - t6)) unlink_ms=$((t8 - t7))"
}

if [ "$MODE" = bench ]; then
  step workdir mkdir "$W"
  step bench bench
elif [ "$MODE" = ro ]; then
  step ro_manifest ro_manifest
  step ro_refusals ro_refusals
  step ro_escape ro_escape
else
  step workdir mkdir "$W"
  step big_file big_file
  step small_files small_files
  step many_entries many_entries
  step renames renames
  step symlinks symlinks
  step edits edits
  step escape escape
fi
