#!/bin/sh
# Runs inside the image's root filesystem as root (chroot for amd64, an
# emulated boot for arm64) after the overlay is copied in: installs the oapd
# .deb the way a user would, enables the image's own units, and removes
# per-machine and build-time state.
set -eu
export DEBIAN_FRONTEND=noninteractive LC_ALL=C
PATH=/usr/sbin:/usr/bin:/sbin:/bin
dpkg -i /tmp/oapd-image/oapd.deb
# The .deb must have enabled the service itself (that is what users get).
systemctl is-enabled oapd.service
# Pi: write /boot/firmware (cmdline.txt, config.txt, kernel, initrd) again,
# now with the image's /etc/default/raspi-firmware (root found by label).
if [ -x /etc/kernel/postinst.d/z50-raspi-firmware ]; then
    DEB_MAINT_PARAMS=configure /etc/kernel/postinst.d/z50-raspi-firmware
    cat /boot/firmware/cmdline.txt
fi
systemctl enable systemd-networkd.service oapd-firstboot.service oapd-growroot.service oapd-bootcheck.service
# SSH stays off until the first-boot settings give a key (firstboot enables
# it then). openssh-server's postinst enabled it and made host keys: every
# card would share those, so each board makes its own when sshd first
# starts (the ssh.service drop-in in the overlay).
systemctl disable ssh.service ssh.socket
rm -f /etc/ssh/ssh_host_*
if systemctl is-enabled --quiet ssh.service; then
    echo "oapd-image: ssh.service is still enabled" >&2
    exit 1
fi
# Wi-Fi only when the first-boot settings configure it.
systemctl disable wpa_supplicant.service
# Runs only when the first-boot settings asked for Ollama (its env file).
systemctl enable oapd-ollama-install.service
# Build the index now, as the service user, where the service keeps it: the
# first boot then maps it instead of embedding every bundled manifest (seconds
# on a Pi 4, minutes under emulation). Not fatal: oapd builds it at start.
install -d -o oapd -g oapd -m 0750 /var/lib/oapd
if runuser -u oapd -- sh -c 'cd /var/lib/oapd && timeout 900 /usr/bin/oapd --config /etc/oapd/config.yaml index'; then
    echo "oapd-image: index prebuilt"
else
    echo "oapd-image: index not prebuilt; oapd builds it at first start" >&2
fi
# No password logins: root is locked, sshd takes keys only (the overlay's
# sshd_config.d drop-in); the first-boot settings may add one SSH user.
passwd -l root >/dev/null
apt-get clean
rm -rf /var/lib/apt/lists/* /tmp/oapd-image /var/log/*.log /var/log/apt/*.log /var/cache/debconf/*-old
# A fresh machine id on every board's first boot.
echo uninitialized > /etc/machine-id
rm -f /var/lib/dbus/machine-id
echo "oapd-image: configured"
