#!/bin/sh
# A parent agent for the README's walk-through: it spawns two children, and
# the first spawns a grandchild. Inside an agent, `kin spawn` needs no
# --parent: kin knows who is calling (KIN_SOCKET).
kin spawn --name collector -- sh -c 'kin spawn --name scraper -- sleep 3600 >/dev/null; exec sleep 3600' >/dev/null
kin spawn --name writer -- sleep 3600 >/dev/null
echo "parent $KIN_AGENT_ID spawned its children"
exec sleep 3600
