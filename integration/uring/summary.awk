# summary.awk - the medians of the file backstore's random-read benchmarks against fio, from
# lines "FS DIRECT BENCH IOPS CPU-NS" (BENCH: Queue, Fio, ReadAt, Engine, EngineSync), sorted;
# bench.sh (host) and vm-bench.sh (the test VM) print their tables with it.
function med(a, n,   i, j, t) {
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
# every prints the medians of every benchmark and case there were lines for.
function every(   k, i, j, t, r, kf, order, nk, a, c, jb) {
	printf "\nEvery benchmark, medians (IOPS, CPU ns per I/O, and fio's job alone):\n| file system | O_DIRECT | benchmark | runs | IOPS | CPU ns/I/O | job CPU ns/I/O |\n|---|---|---|---:|---:|---:|---:|\n"
	for (k in keys) order[++nk] = k
	for (i = 1; i <= nk; i++) for (j = i + 1; j <= nk; j++) if (order[j] < order[i]) { t = order[i]; order[i] = order[j]; order[j] = t }
	for (i = 1; i <= nk; i++) {
		k = order[i]; split(k, kf, " ")
		for (r = 1; r <= n[k]; r++) { a[r] = io[k, r]; c[r] = cp[k, r]; jb[r] = jc[k, r] }
		printf "| %s | %s | %s | %d | %.0f | %.0f | %s |\n", kf[1], kf[2] ? "yes" : "no", kf[3], n[k], med(a, n[k]), med(c, n[k]), jc[k, 1] != "" ? sprintf("%.0f", med(jb, n[k])) : ""
	}
}
{ k = $1 " " $2 " " $3; n[k]++; io[k, n[k]] = $4; cp[k, n[k]] = $5; jc[k, n[k]] = $6; keys[k] = 1 }
END {
	printf "| file system | O_DIRECT | Queue IOPS | fio IOPS | Queue / fio | Queue CPU ns/I/O | fio CPU ns/I/O | Queue / fio | workers, pread: IOPS | CPU ns/I/O |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
	split("tmpfs ext4", fss, " ")
	for (f = 1; f <= 2; f++) for (d = 0; d <= 1; d++) {
		q = fss[f] " " d " Queue"; o = fss[f] " " d " Fio"
		if (!(q in keys) || !(o in keys)) continue
		for (i = 1; i <= n[q]; i++) { a[i] = io[q, i]; c[i] = cp[q, i] }
		qi = med(a, n[q]); qc = med(c, n[q])
		for (i = 1; i <= n[o]; i++) { a[i] = io[o, i]; c[i] = cp[o, i] }
		oi = med(a, n[o]); oc = med(c, n[o])
		p = fss[f] " " d " ReadAt"; pi = pc = 0
		if (p in keys) { for (i = 1; i <= n[p]; i++) { a[i] = io[p, i]; c[i] = cp[p, i] }; pi = med(a, n[p]); pc = med(c, n[p]) }
		printf "| %s | %s | %.0f | %.0f | %.2f | %.0f | %.0f | %.2f | %.0f | %.0f |\n", fss[f], d ? "yes" : "no", qi, oi, qi / oi, qc, oc, qc / oc, pi, pc
		e = fss[f] " " d " Engine"; s = fss[f] " " d " EngineSync"
		if (!(e in keys)) continue
		for (i = 1; i <= n[e]; i++) { a[i] = io[e, i]; c[i] = cp[e, i] }
		ei[f, d] = med(a, n[e]); ec[f, d] = med(c, n[e]); oio[f, d] = oi; ocp[f, d] = oc
		if (s in keys) { for (i = 1; i <= n[s]; i++) { a[i] = io[s, i]; c[i] = cp[s, i] }; si[f, d] = med(a, n[s]); sc[f, d] = med(c, n[s]) }
		any = 1
	}
	if (!any) { every(); exit }
	printf "\nThe whole engine (BenchmarkFileLUNRandRead4K: initiator, memfabric, target, file LUN), io_uring and sync:\n"
	printf "| file system | O_DIRECT | engine io_uring IOPS | fio IOPS | engine / fio | engine CPU ns/I/O | fio CPU ns/I/O | engine / fio | engine sync: IOPS | CPU ns/I/O |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
	for (f = 1; f <= 2; f++) for (d = 0; d <= 1; d++) {
		if (!((f, d) in ei)) continue
		printf "| %s | %s | %.0f | %.0f | %.2f | %.0f | %.0f | %.2f | %.0f | %.0f |\n", fss[f], d ? "yes" : "no", ei[f, d], oio[f, d], ei[f, d] / oio[f, d], ec[f, d], ocp[f, d], ec[f, d] / ocp[f, d], si[f, d], sc[f, d]
	}
	every()
}
