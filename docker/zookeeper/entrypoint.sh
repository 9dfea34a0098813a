#!/bin/sh
# Writes zoo.cfg from the official image's variables (the ones docker-compose.yml sets, and their
# defaults there) and runs the server in the foreground, logging to stdout.
set -eu
cfg=/tmp/zoo.cfg
{
  echo "dataDir=/data"
  echo "dataLogDir=/datalog"
  echo "clientPort=2181"
  echo "tickTime=${ZOO_TICK_TIME:-2000}"
  echo "initLimit=${ZOO_INIT_LIMIT:-5}"
  echo "syncLimit=${ZOO_SYNC_LIMIT:-2}"
  echo "maxClientCnxns=${ZOO_MAX_CLIENT_CNXNS:-60}"
  echo "4lw.commands.whitelist=${ZOO_4LW_COMMANDS_WHITELIST:-srvr}"
  echo "admin.enableServer=${ZOO_ADMINSERVER_ENABLED:-false}"
  echo "autopurge.snapRetainCount=${ZOO_AUTOPURGE_SNAPRETAINCOUNT:-3}"
  echo "autopurge.purgeInterval=${ZOO_AUTOPURGE_PURGEINTERVAL:-24}"
  for entry in ${ZOO_CFG_EXTRA:-}; do echo "$entry"; done
} > "$cfg"
# shellcheck disable=SC2086  # JVMFLAGS is a list of flags
exec java ${JVMFLAGS:-} -cp /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar \
  org.apache.zookeeper.server.quorum.QuorumPeerMain "$cfg"
