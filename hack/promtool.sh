#!/usr/bin/env bash
# Makes sure promtool, which runs the alert rules' unit tests, is on PATH.
# It comes from Debian's prometheus package: when it is missing and this is
# a Debian machine run as root, the package is installed; otherwise the
# script says how to get it and fails. PROMTOOL=<path> names one explicitly.
set -euo pipefail

if [[ -n "${PROMTOOL:-}" ]]; then
	[[ -x "${PROMTOOL}" ]] || { echo "PROMTOOL=${PROMTOOL} is not an executable" >&2; exit 1; }
	exit 0
fi
command -v promtool >/dev/null && exit 0
if command -v apt-get >/dev/null && [[ "$(id -u)" == 0 ]]; then
	echo "installing promtool (Debian package prometheus)"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
	command -v promtool >/dev/null && exit 0
fi
echo "the alert rules' tests need promtool: install Debian's prometheus package (apt-get install prometheus) or set PROMTOOL to its path" >&2
exit 1
