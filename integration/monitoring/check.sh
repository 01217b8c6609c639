#!/bin/bash
# The Prometheus side of configs/monitoring, checked by promtool: the alerting rules parse
# (promtool check rules), behave as their unit tests say (promtool test rules: each alert
# fires on the series that should raise it, with its labels and text, and not on a healthy
# target), and every PromQL query of the Grafana dashboard parses (as recording rules written
# by integration/monitoring/dashrules). That every series and label they name is one the
# daemon exports is the Go tests' part (internal/daemon/monitoring_test.go).
#
# promtool comes from Debian's prometheus package. Installing that package would also install
# and start a Prometheus server, so when promtool is not on PATH, the package is fetched with
# apt-get download and promtool alone is taken out of it, into $SRPT_PROMTOOL_CACHE (default
# /var/cache/srptarget-ci/promtool). `make monitoring-test` runs it.
set -eu
cd "$(dirname "$0")/../.."
GO=${GO:-go}
CACHE=${SRPT_PROMTOOL_CACHE:-/var/cache/srptarget-ci/promtool}
die() { echo "monitoring-test: $*" >&2; exit 1; }

promtool=$(command -v promtool || true)
if [ -z "$promtool" ]; then
	promtool=$CACHE/usr/bin/promtool
	if [ ! -x "$promtool" ]; then
		command -v apt-get >/dev/null || die "no promtool on PATH and no apt-get to fetch Debian's prometheus package"
		mkdir -p "$CACHE"
		dl=$(mktemp -d)
		trap 'rm -rf "$dl"' EXIT
		chmod 0755 "$dl" # apt-get download writes as _apt where it can
		if ! (cd "$dl" && apt-get download -q prometheus >"$dl/apt.log" 2>&1); then
			apt-get update -qq && (cd "$dl" && apt-get download -q prometheus >"$dl/apt.log" 2>&1) ||
				{ cat "$dl/apt.log"; die "apt-get download prometheus failed"; }
		fi
		dpkg-deb --fsys-tarfile "$dl"/prometheus_*.deb | tar -x -C "$CACHE" ./usr/bin/promtool ||
			die "no usr/bin/promtool in $(ls "$dl"/prometheus_*.deb)"
	fi
fi
echo "monitoring-test: $("$promtool" --version 2>&1 | head -1)"

out=$(mktemp -d)
trap 'rm -rf "$out" ${dl:+"$dl"}' EXIT
"$promtool" check rules configs/monitoring/srptarget-alerts.yml
(cd configs/monitoring && "$promtool" test rules srptarget-alerts.test.yml)
$GO run ./integration/monitoring/dashrules configs/monitoring/srptarget-dashboard.json >"$out/dashboard-rules.yml"
echo "the dashboard's queries:"
"$promtool" check rules "$out/dashboard-rules.yml"
