#!/bin/sh
# Install the package's config files: `settings.env` -> <root>/etc/default/noderoll-script,
# `motd` -> <root>/etc/motd, and a unit that reads the settings. Defaults when a file is absent.
set -eu
root="${NODEROLL_ROOT:-/}"
cfg="${NODEROLL_CONFIG_DIR:-/nonexistent}"
mkdir -p "$root/etc/default" "$root/etc/systemd/system"
if [ -f "$cfg/settings.env" ]; then cp "$cfg/settings.env" "$root/etc/default/noderoll-script"
else echo "LOG_LEVEL=info" > "$root/etc/default/noderoll-script"; fi
if [ -f "$cfg/motd" ]; then cp "$cfg/motd" "$root/etc/motd"; else echo "managed by noderoll" > "$root/etc/motd"; fi
cat > "$root/etc/systemd/system/noderoll-script.service" <<UNIT
[Unit]
Description=noderoll example service configured by script-config
[Service]
EnvironmentFile=/etc/default/noderoll-script
ExecStart=/bin/sh -c 'echo running with \$LOG_LEVEL; sleep infinity'
UNIT
echo "installed settings ($(wc -l < "$root/etc/default/noderoll-script") lines) and motd"
