/*
 * insn.c - a qemu TCG plugin that counts the guest instructions a VM executes, kernel and
 * user apart, and the system calls user space makes, for the two-host bench
 * (integration/vm/bench-2host.sh): instructions do not depend on the host's load or on how
 * much slower TCG runs cold code than warm, so they measure a target's CPU cost where time
 * cannot. Optionally it also counts executions per translation block (TB), which the report
 * (integration/vm/bench, insnfunc.go) maps to functions with the guest's symbols.
 *
 *   qemu-system-x86_64 ... -plugin insn.so,out=FILE[,interval=MS][,tb=FILE][,tbint=MS]
 *
 * out=FILE     "S epoch_us kernel user syscalls" every interval, cumulative since qemu
 *              started (epoch_us: the host's CLOCK_REALTIME in microseconds), and once more
 *              at exit.
 * interval=MS  default 250.
 * tb=FILE      per-TB counts: "T id vaddr insns" names a TB (one id per start address and
 *              length, kept across retranslations); "D epoch_us" starts a dump, followed by
 *              "id executions" lines, the executions since the previous dump of the TBs that
 *              ran. The first line is "# insn-tb 1".
 * tbint=MS     per-TB dump interval, default 1000; 0: at exit only.
 *
 * Plugin API version 1, that of QEMU 6 to 8 (Debian 12 ships 7.2): the declarations used
 * are below (include/qemu/qemu-plugin.h of QEMU 7.2), so that no qemu header is needed.
 * QEMU 9 dropped the inline operations on plain pointers used here.
 *
 * Kernel or user: a TB whose start address is in the upper half of the x86-64 address space
 * is the kernel's. A TB is counted whole when it starts (a fault inside it overcounts it a
 * little). A system call is a user TB whose last instruction is SYSCALL (0f 05): TCG ends a
 * TB there. With one vCPU every counter is an inline add in the generated code (exact,
 * cheap); with more, the v1 inline add is not atomic, so a callback per TB adds to per-vCPU
 * counters instead (slower).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define QEMU_PLUGIN_EXPORT __attribute__((visibility("default")))
typedef uint64_t qemu_plugin_id_t;
typedef struct {
	const char *target_name;
	struct {
		int min, cur;
	} version;
	bool system_emulation;
	union {
		struct {
			int smp_vcpus, max_vcpus;
		} system;
	};
} qemu_info_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS };
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void *userdata);
typedef void (*qemu_plugin_vcpu_udata_cb_t)(unsigned int vcpu_index, void *userdata);
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *tb, qemu_plugin_vcpu_udata_cb_t cb,
					  enum qemu_plugin_cb_flags flags, void *userdata);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb, enum qemu_plugin_op op,
					      void *ptr, uint64_t imm);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
const void *qemu_plugin_insn_data(const struct qemu_plugin_insn *insn);
size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *insn);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb, void *userdata);
void qemu_plugin_outs(const char *string);

QEMU_PLUGIN_EXPORT int qemu_plugin_version = 1;

#define KERNEL_BASE 0xffff800000000000ULL
#define MAX_VCPUS 64

enum { C_KERNEL, C_USER, C_SYSCALL, NCOUNT };

/* Counters per vCPU, each on a cache line of its own. */
static struct {
	uint64_t n[NCOUNT];
	char pad[64 - NCOUNT * sizeof(uint64_t)];
} vcpu[MAX_VCPUS];
static int nvcpu = 1;

/* One per distinct TB (start address, length); allocated in blocks that never move, since
 * the generated code adds to execs through a pointer. */
struct tb {
	uint64_t vaddr;
	uint64_t execs;  /* cumulative */
	uint64_t dumped; /* execs at the previous dump */
	uint32_t insns;
	uint16_t user;
	uint16_t syscall; /* ends with SYSCALL */
};
#define BLOCK 8192
#define MAX_BLOCKS 4096
static struct tb *blocks[MAX_BLOCKS];
static uint32_t ntb;     /* TBs in use */
static uint32_t nnamed;  /* TBs already named in the tb file */
static uint32_t *table;  /* open addressing, index + 1; 0 is empty */
static uint32_t tablen;  /* a power of two */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static FILE *out, *tbout;
static long interval_ms = 250, tbint_ms = 1000;
static pthread_t ticker;
static bool ticking;
static volatile bool stopping;

static uint64_t epoch_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static struct tb *tb_at(uint32_t i)
{
	return &blocks[i / BLOCK][i % BLOCK];
}

static uint32_t slot_of(uint64_t vaddr, uint32_t insns)
{
	uint64_t h = (vaddr ^ (uint64_t)insns << 48) * 0x9e3779b97f4a7c15ULL;
	return (uint32_t)(h >> 32) & (tablen - 1);
}

static bool grow(void)
{
	uint32_t n = tablen ? tablen * 2 : 1u << 16;
	uint32_t *t = calloc(n, sizeof(*t));
	if (!t)
		return false;
	free(table);
	table = t;
	tablen = n;
	for (uint32_t i = 0; i < ntb; i++) {
		struct tb *e = tb_at(i);
		uint32_t s = slot_of(e->vaddr, e->insns);
		while (table[s])
			s = (s + 1) & (tablen - 1);
		table[s] = i + 1;
	}
	return true;
}

/* The entry of (vaddr, insns), made when new; NULL when out of memory. Called with mu held. */
static struct tb *lookup(uint64_t vaddr, uint32_t insns)
{
	if ((uint64_t)(ntb + 1) * 2 > tablen && !grow())
		return NULL;
	uint32_t s = slot_of(vaddr, insns);
	for (; table[s]; s = (s + 1) & (tablen - 1)) {
		struct tb *e = tb_at(table[s] - 1);
		if (e->vaddr == vaddr && e->insns == insns)
			return e;
	}
	if (ntb >= (uint32_t)MAX_BLOCKS * BLOCK)
		return NULL;
	if (ntb % BLOCK == 0 && !(blocks[ntb / BLOCK] = calloc(BLOCK, sizeof(struct tb))))
		return NULL;
	struct tb *e = tb_at(ntb);
	e->vaddr = vaddr;
	e->insns = insns;
	table[s] = ++ntb;
	return e;
}

static bool ends_in_syscall(const struct qemu_plugin_tb *tb, size_t n)
{
	const struct qemu_plugin_insn *last = qemu_plugin_tb_get_insn(tb, n - 1);
	const uint8_t *b = qemu_plugin_insn_data(last);
	return qemu_plugin_insn_size(last) == 2 && b[0] == 0x0f && b[1] == 0x05;
}

/* Several vCPUs: udata is a struct tb, or (without tb=) insns << 2 | syscall << 1 | user. */
static void on_exec_tb(unsigned int cpu, void *udata)
{
	struct tb *e = udata;
	if (cpu >= MAX_VCPUS)
		return;
	vcpu[cpu].n[e->user ? C_USER : C_KERNEL] += e->insns;
	vcpu[cpu].n[C_SYSCALL] += e->syscall;
	__atomic_fetch_add(&e->execs, 1, __ATOMIC_RELAXED);
}

static void on_exec(unsigned int cpu, void *udata)
{
	uintptr_t u = (uintptr_t)udata;
	if (cpu >= MAX_VCPUS)
		return;
	vcpu[cpu].n[(u & 1) ? C_USER : C_KERNEL] += u >> 2;
	vcpu[cpu].n[C_SYSCALL] += (u >> 1) & 1;
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
	uint64_t vaddr = qemu_plugin_tb_vaddr(tb);
	size_t n = qemu_plugin_tb_n_insns(tb);
	bool user = vaddr < KERNEL_BASE;
	bool sc = user && n > 0 && ends_in_syscall(tb, n);
	struct tb *e = NULL;
	(void)id;

	if (tbout) {
		pthread_mutex_lock(&mu);
		e = lookup(vaddr, (uint32_t)n);
		if (e) {
			e->user = user;
			e->syscall = sc;
		}
		pthread_mutex_unlock(&mu);
	}
	if (nvcpu > 1) {
		if (e)
			qemu_plugin_register_vcpu_tb_exec_cb(tb, on_exec_tb, QEMU_PLUGIN_CB_NO_REGS, e);
		else
			qemu_plugin_register_vcpu_tb_exec_cb(tb, on_exec, QEMU_PLUGIN_CB_NO_REGS,
							     (void *)(uintptr_t)(n << 2 | (size_t)sc << 1 | user));
		return;
	}
	qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64,
						 &vcpu[0].n[user ? C_USER : C_KERNEL], n);
	if (sc)
		qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &vcpu[0].n[C_SYSCALL], 1);
	if (e)
		qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &e->execs, 1);
}

static void write_sample(char tag)
{
	uint64_t sum[NCOUNT] = {0};
	for (int c = 0; c < nvcpu; c++)
		for (int k = 0; k < NCOUNT; k++)
			sum[k] += __atomic_load_n(&vcpu[c].n[k], __ATOMIC_RELAXED);
	fprintf(out, "%c %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", tag, epoch_us(), sum[C_KERNEL],
		sum[C_USER], sum[C_SYSCALL]);
	fflush(out);
}

static void write_dump(void)
{
	pthread_mutex_lock(&mu);
	for (; nnamed < ntb; nnamed++) {
		struct tb *e = tb_at(nnamed);
		fprintf(tbout, "T %u %" PRIx64 " %u\n", nnamed, e->vaddr, e->insns);
	}
	fprintf(tbout, "D %" PRIu64 "\n", epoch_us());
	for (uint32_t i = 0; i < ntb; i++) {
		struct tb *e = tb_at(i);
		uint64_t x = __atomic_load_n(&e->execs, __ATOMIC_RELAXED);
		if (x != e->dumped) {
			fprintf(tbout, "%u %" PRIu64 "\n", i, x - e->dumped);
			e->dumped = x;
		}
	}
	fflush(tbout);
	pthread_mutex_unlock(&mu);
}

static void add_ms(struct timespec *t, long ms)
{
	t->tv_sec += ms / 1000;
	t->tv_nsec += (ms % 1000) * 1000000L;
	if (t->tv_nsec >= 1000000000L) {
		t->tv_nsec -= 1000000000L;
		t->tv_sec++;
	}
}

static bool before(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

static void *tick(void *arg)
{
	struct timespec next, dump;
	(void)arg;
	clock_gettime(CLOCK_MONOTONIC, &next);
	dump = next;
	add_ms(&dump, tbint_ms);
	while (!stopping) {
		add_ms(&next, interval_ms);
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR)
			;
		if (stopping)
			break;
		write_sample('S');
		if (tbout && tbint_ms > 0 && !before(&next, &dump)) {
			write_dump();
			while (!before(&next, &dump))
				add_ms(&dump, tbint_ms);
		}
	}
	return NULL;
}

static void on_atexit(qemu_plugin_id_t id, void *p)
{
	(void)id;
	(void)p;
	if (ticking) {
		stopping = true;
		pthread_join(ticker, NULL);
		ticking = false;
	}
	write_sample('X');
	if (tbout)
		write_dump();
}

static int fail(const char *what, const char *arg)
{
	char msg[512];
	snprintf(msg, sizeof(msg), "insn: %s %s\n", what, arg);
	qemu_plugin_outs(msg);
	return -1;
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv)
{
	const char *outp = NULL, *tbp = NULL;

	for (int i = 0; i < argc; i++) {
		const char *a = argv[i], *v = strchr(a, '=');
		if (!v)
			return fail("argument without a value:", a);
		v++;
		if (!strncmp(a, "out=", 4))
			outp = v;
		else if (!strncmp(a, "tb=", 3))
			tbp = v;
		else if (!strncmp(a, "interval=", 9))
			interval_ms = strtol(v, NULL, 10);
		else if (!strncmp(a, "tbint=", 6))
			tbint_ms = strtol(v, NULL, 10);
		else
			return fail("unknown argument", a);
	}
	if (!outp)
		return fail("out=FILE is required", "");
	if (interval_ms < 10)
		interval_ms = 10;
	if (tbint_ms < 0)
		tbint_ms = 0;
	if (!info->system_emulation)
		return fail("needs system emulation (qemu-system-*)", "");
	nvcpu = info->system.max_vcpus > info->system.smp_vcpus ? info->system.max_vcpus : info->system.smp_vcpus;
	if (nvcpu < 1)
		nvcpu = 1;
	if (nvcpu > MAX_VCPUS)
		return fail("too many vCPUs for", "insn");
	if (!(out = fopen(outp, "w")))
		return fail(strerror(errno), outp);
	if (tbp) {
		if (!(tbout = fopen(tbp, "w")))
			return fail(strerror(errno), tbp);
		fprintf(tbout, "# insn-tb 1 target=%s\n", info->target_name);
	}
	fprintf(out, "# insn 1 target=%s vcpus=%d %s interval_ms=%ld tb=%s\n", info->target_name, nvcpu,
		nvcpu > 1 ? "callbacks" : "inline", interval_ms, tbp ? "on" : "off");
	write_sample('S');
	qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
	qemu_plugin_register_atexit_cb(id, on_atexit, NULL);
	ticking = pthread_create(&ticker, NULL, tick, NULL) == 0;
	return 0;
}
