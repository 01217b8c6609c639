#!/usr/bin/env bash
# gobench.sh - instructions per operation of a Go benchmark, by function, counted by valgrind's
# callgrind: exact counts that do not depend on the host's load, where ns/op on a shared
# machine moves by 10-30 %. The benchmark runs twice, N1 and N2 operations (each run does the
# same set-up), and the difference divided by N2 - N1 is what one operation costs.
#
#   integration/insn/gobench.sh PKG BENCH [N1 N2]
#   integration/insn/gobench.sh ./srp 'BenchmarkRoundTrip/read/qd32/event$'
#
# Prints the instructions per operation of the whole process, of the target's own packages
# (INSN_PKGS, a regular expression over function names; INSN_EXCLUDE takes out the test's
# initiator), and the INSN_TOP (40) functions that cost most, "T" marking the target's.
# Go's asynchronous preemption is off (callgrind does not follow its signals) and so is the
# garbage collector (the I/O path allocates nothing; a collection would land in one run only).
# INSN_SKIP is passed as -test.skip (BenchmarkChannels/^channels=64$ also matches its qd=1
# row), INSN_GOMAXPROCS as -test.cpu, and INSN_TASKSET runs the process on those CPUs
# (taskset -c): on one CPU the engine's default completion is event, so no idle polling
# whose count follows valgrind's thread schedule lands in the result.
# Needs valgrind; keeps its files in INSN_OUT (a temporary directory).
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,21p' "$0" >&2; exit 2; }
pkg=$1 bench=$2 n1=${3:-2000} n2=${4:-12000}
pkgs=${INSN_PKGS:-'^(srp|srp/iu|scsi|backstore)\.'}
exclude=${INSN_EXCLUDE:-'srp_test\.|iu\.Cmd\.[Ee]ncode|iu\.CmdLen|DataBufFields|iu\.Rsp\.(Status|Tag)$'}
top=${INSN_TOP:-40}
command -v valgrind >/dev/null || { echo "gobench.sh: needs valgrind (apt-get install valgrind)" >&2; exit 3; }
out=${INSN_OUT:-$(mktemp -d)}
GO=${GO:-go}
"$GO" test -c -o "$out/bench.test" "$pkg"
pin=()
[ -z "${INSN_TASKSET:-}" ] || pin=(taskset -c "$INSN_TASKSET")
args=(-test.run '^$' -test.bench "$bench")
[ -z "${INSN_SKIP:-}" ] || args+=(-test.skip "$INSN_SKIP")
[ -z "${INSN_GOMAXPROCS:-}" ] || args+=(-test.cpu "$INSN_GOMAXPROCS")
for n in "$n1" "$n2"; do
	GOGC=off GODEBUG=asyncpreemptoff=1 "${pin[@]}" valgrind --tool=callgrind --callgrind-out-file="$out/$n.out" \
		"$out/bench.test" "${args[@]}" -test.benchtime "${n}x" >"$out/$n.log" 2>&1 ||
		{ cat "$out/$n.log" >&2; exit 1; }
	callgrind_annotate --tree=none --auto=no --threshold=100 "$out/$n.out" >"$out/$n.txt"
done
# Lines: "  1,234 ( 0.50%)  /path/file.go:pkg.Func [binary]". Recursion suffixes ('2) merge.
awk -v out="$out" -v n1="$n1" -v n2="$n2" -v pkgs="$pkgs" -v excl="$exclude" '
function parse(line,   m, cnt, name) {
	if (!match(line, /^ *[0-9,]+ +\( *[0-9.]+%\) +/)) return ""
	cnt = substr(line, 1, RLENGTH); sub(/\(.*/, "", cnt); gsub(/[ ,]/, "", cnt)
	name = substr(line, RLENGTH + 1); sub(/ \[.*\]$/, "", name)
	if (name ~ /PROGRAM TOTALS/) { total[file] = cnt + 0; return "" }
	sub(/^[^:]*:/, "", name); sub(/^github\.com\/srptarget\/srptarget\//, "", name); sub(/'\''[0-9]+$/, "", name)
	val = cnt; return name
}
FNR == 1 { file++ }
{ name = parse($0); if (name == "") next; if (file == 1) a[name] += val; else b[name] += val; seen[name] = 1 }
END {
	dn = n2 - n1
	for (k in seen) {
		d = (b[k] - a[k]) / dn
		own = (k ~ pkgs && k !~ excl)
		if (own) ownsum += d
		printf "%.0f\t%s%s\n", d, own ? "T " : "  ", k > (out "/functions.txt")
	}
	printf "instructions per operation: all %.0f, target packages %.0f\n", (total[2] - total[1]) / dn, ownsum
}' "$out/$n1.txt" "$out/$n2.txt"
sort -t"$(printf '\t')" -k1,1 -rn "$out/functions.txt" | head -n "$top"
