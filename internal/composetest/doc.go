// Package composetest holds the fault-injection tests of the
// docker-compose cluster (make test-cluster): real containers on a private
// network, a worker killed, a server killed and restarted. They build the
// image themselves (scripts/image.sh) and skip, saying why, where no Docker
// engine answers.
package composetest
