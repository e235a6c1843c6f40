#!/bin/busybox sh
# PID 1 of the test guest: mount the host's 9P export over TCP, run the workload, power off.
# Kernel command line: cornus.port=N cornus.mode=rw|ro cornus.opts=extra,mount,options
/bin/busybox mkdir -p /proc /sys /dev /tmp /mnt
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs -o size=256m tmpfs /tmp
exec </dev/console >/dev/console 2>&1
OUT=/dev/ttyS1
stty -F $OUT raw -echo 2>/dev/null

PORT=564 MODE=rw OPTS= FDOPTS=
for word in $(cat /proc/cmdline); do
  case "$word" in
    cornus.port=*) PORT=${word#*=};;
    cornus.mode=*) MODE=${word#*=};;
    cornus.opts=*) OPTS=${word#*=};;
    cornus.fdopts=*) FDOPTS=${word#*=};;
  esac
done

for m in $(cat /modules/order); do insmod /modules/$m.ko || echo "insmod $m failed"; done
ip link set lo up
ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0

# With cornus.fdopts (trans=fd,rfdno=3,wfdno=4,...), the kernel gets file descriptors instead: two FIFOs
# that nc relays to the server, as the caretaker hands it one end of a relayed socketpair.
mount_9p() {
  if [ -z "$FDOPTS" ]; then
    mount -t 9p -o "trans=tcp,port=$PORT,version=9p2000.L${OPTS:+,$OPTS}" 10.0.2.2 /mnt
    return
  fi
  mkfifo /tmp/to-server /tmp/from-server
  nc 10.0.2.2 "$PORT" < /tmp/to-server > /tmp/from-server &
  mount -t 9p -o "$FDOPTS${OPTS:+,$OPTS}" cornus /mnt 4> /tmp/to-server 3< /tmp/from-server
}

if mount_9p; then
  echo "RESULT mount ok $(grep ' /mnt ' /proc/mounts | cut -d' ' -f4)" > $OUT
  sh /workload.sh /mnt "$MODE" > $OUT 2>/tmp/workload.err
  tail -n 30 /tmp/workload.err
  if umount /mnt; then echo "RESULT umount ok" > $OUT; else echo "RESULT umount fail" > $OUT; fi
else
  echo "RESULT mount fail" > $OUT
  dmesg | tail -n 20
fi
echo "RESULT end" > $OUT
sync
poweroff -f
