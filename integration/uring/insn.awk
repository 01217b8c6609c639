# insn.awk - the guest's instructions per I/O of each run of vm-bench.sh with the qemu plugin
# (SRPT_URING_INSN=1): reads the plugin's samples ("S epoch_us kernel user syscalls",
# cumulative), then the console log (run-vm.sh's "t0 epoch us", each line stamped with the
# host's seconds since then): a run spans its "URINGMARK fs direct bench start" and "end"
# lines and did the reads of its URINGBENCH line (the ios= argument: fio exactly, the Go
# benchmarks that many plus a run of one and their warm-up). The rate of the idle window
# ("URINGMARK idle") is taken out. Prints a table of medians per case and benchmark:
# instructions per I/O in all, kernel, user and system calls per I/O.
#
#   awk -f insn.awk insn.txt console.log
function at(x, kind,   i, w) {
	for (i = 2; i <= ns; i++) if (t[i] >= x) break
	if (i > ns || t[1] > x) return -1
	w = (x - t[i - 1]) / (t[i] - t[i - 1])
	return c[i - 1, kind] + (c[i, kind] - c[i - 1, kind]) * w
}
function med(a, n,   i, j, tt) {
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { tt = a[i]; a[i] = a[j]; a[j] = tt }
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
FNR == NR { if ($1 == "S") { ns++; t[ns] = $2 / 1e6; c[ns, 1] = $3; c[ns, 2] = $4; c[ns, 3] = $5 }; next }
/run-vm: t0 epoch us/ { t0 = $NF / 1e6; next }
/URINGINFO guest:/ { if (match($0, /rounds of [0-9]+ reads/)) { s = substr($0, RSTART + 10); ios = s + 0 } }
/URINGMARK / {
	if (!match($0, /^\[ *[0-9.]+\]/)) next
	ts = substr($0, RSTART + 1, RLENGTH - 2) + 0
	for (i = 1; i <= NF; i++) if ($i == "URINGMARK") break
	key = $(i + 1) " " $(i + 2) " " $(i + 3)
	if ($(i + 4) == "start") { from[key] = t0 + ts; next }
	a = from[key]; b = t0 + ts
	for (k = 1; k <= 3; k++) { x = at(a, k); y = at(b, k); d[k] = (x < 0 || y < 0) ? -1 : y - x }
	if (d[1] < 0) { missing++; next }
	if (key == "idle - -") { for (k = 1; k <= 3; k++) idle[k] = d[k] / (b - a); next }
	n[key]++; keys[key] = 1
	for (k = 1; k <= 3; k++) v[key, k, n[key]] = d[k] - idle[k] * (b - a)
}
END {
	printf "| file system | O_DIRECT | benchmark | runs | instructions / I/O | kernel | user | system calls / I/O |\n|---|---|---|---:|---:|---:|---:|---:|\n"
	for (key in keys) order[++nk] = key
	for (i = 1; i <= nk; i++) for (j = i + 1; j <= nk; j++) if (order[j] < order[i]) { tt = order[i]; order[i] = order[j]; order[j] = tt }
	for (i = 1; i <= nk; i++) {
		key = order[i]; split(key, f, " ")
		for (r = 1; r <= n[key]; r++) { ka[r] = v[key, 1, r] / ios; ua[r] = v[key, 2, r] / ios; sa[r] = v[key, 3, r] / ios; ta[r] = ka[r] + ua[r] }
		printf "| %s | %s | %s | %d | %.0f | %.0f | %.0f | %.2f |\n", f[1], f[2] ? "yes" : "no", f[3], n[key], med(ta, n[key]), med(ka, n[key]), med(ua, n[key]), med(sa, n[key])
	}
	if (missing) printf "(%d runs outside the plugin's samples left out)\n", missing
	printf "(idle: %.0f instructions/s; %d reads per run)\n", idle[1] + idle[2], ios
}
