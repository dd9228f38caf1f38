'use strict';
/*
 * libasp for Node: a koffi binding of include/asp.h.
 *
 * Every call that talks to the sandbox runs as a koffi `.async` call on a
 * libuv worker thread, so the event loop keeps ticking while a command runs.
 * Quick local calls (result accessors, cancel tokens, error names) are
 * synchronous.
 *
 * Copyright (c) 2026 The libasp authors. MIT licence, see LICENSE.
 */

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const koffi = requireKoffi();

/* ------------------------------------------------------------ constants */

const READ_ALL = 0xffffffffffffffffn; // ASP_READ_ALL
const ASP_OPEN_LAZY = 0x1;
const ASP_STDOUT = 1; // asp_stream: an enum, int-sized on every supported ABI, passed as int
const ASP_STDERR = 2;
const ASP_MKDIR_PARENTS = 0x1;
const ASP_WRITE_PARENTS = 0x1;
const ASP_WRITE_IN_PLACE = 0x2;
const ASP_REMOVE_RECURSIVE = 0x1;
const OPEN_OPTIONS_VERSION = 3;
const WRITE_OPTIONS_VERSION = 1;
const CALL_OPTIONS_VERSION = 1;
const EXEC_OPTIONS_VERSION = 1;
const PROC_OPTIONS_VERSION = 1;
const ASP_PROC_PTY = 0x1;
const ASP_ETIMEOUT = -10;
const SANDBOX_INFO_VERSION = 1;
const ERROR_MESSAGE_MAX = 512;
const ASP_EINVAL = -2;
const ASP_ECANCELLED = -11;
/* The last code in asp.h today; codes are only ever appended, see loadCodes(). */
const KNOWN_LAST_CODE = -23;

/*
 * koffi runs a native call on a stack of its own, and an async call's stack
 * is only 128 KiB by default, with no guard page. libasp keeps its I/O
 * buffers on the heap for that reason, but libssh2 and OpenSSL still go
 * deep (key exchange, signing) and nothing bounds them: ask for a
 * thread-sized stack instead (mapped lazily, so it costs address space,
 * not memory).
 */
const ASYNC_STACK_SIZE = 8 * 1024 * 1024;
const MIN_ASYNC_STACK_SIZE = 1024 * 1024;
/*
 * koffi keeps this many async call memories (stack + heap) for reuse; a call
 * beyond them maps a fresh stack and unmaps it afterwards, page faults and
 * all (koffi's default of 4 cost 16 concurrent execs a quarter of their
 * client CPU). 16 is koffi's most.
 */
const RESIDENT_ASYNC_POOLS = 16;
/*
 * Every sandbox call holds a libuv worker thread until it returns (a command
 * can run for minutes), and libuv's default pool has 4 threads: a fifth
 * concurrent exec would wait, and so would the program's own fs and dns
 * calls. Unless UV_THREADPOOL_SIZE says otherwise, start the pool with this
 * many threads (idle ones cost an unused stack each).
 */
const THREADPOOL_SIZE = 64;
const DEFAULT_CONNECTIONS = 4; // libasp's default max_connections

const TYPE_NAMES = { 1: 'file', 2: 'directory', 3: 'symlink', 4: 'other' };
const TRUST_NAMES = { 1: 'pinned', 2: 'known', 3: 'first-use' };
const AUTH_NAMES = { 1: 'none', 2: 'publickey', 3: 'agent' };
const FILES_NAMES = { 0: null, 1: 'sftp', 2: 'exec' };
const FILES_BY_NAME = { auto: 0, sftp: 1, exec: 2 };

/* ------------------------------------------------------------ errors */

/** An error reported by libasp (or an argument libasp would refuse). */
class AspError extends Error {
	constructor(errno, message, options) {
		const code = codeName(errno);
		super(message || `${code}: ${strerror(errno)}`, options);
		this.name = 'AspError';
		/** Symbolic name from asp.h, e.g. 'ASP_ENOENT'. */
		this.code = code;
		/** The negative asp_error_code value, e.g. -12. */
		this.errno = errno;
	}
}

/*
 * koffi, the one dependency. A folder installed with a plain `npm install DIR`
 * is a link whose dependencies npm does not install: say how to install it.
 */
function requireKoffi() {
	try {
		return require('koffi');
	} catch (e) {
		if (e.code !== 'MODULE_NOT_FOUND' || !/'koffi'/.test(e.message))
			throw e;
		throw new Error(`libasp: the koffi package is not installed for ${__dirname}: install the ` +
			'binding from its tarball (`npm pack DIR`, then `npm install ./libasp-VERSION.tgz`) or with ' +
			'`npm install --install-links DIR` (a plain `npm install DIR` links the folder without its ' +
			`dependencies), or run \`npm install\` in ${__dirname}`, { cause: e });
	}
}

/* ------------------------------------------------------------ loading */

let lib = null;        // the bound functions, once loaded
let libraryPath = null;
let codes = null;      // { ASP_OK: 0, ASP_ERROR: -1, ... }
let codeNames = null;  // { '-12': 'ASP_ENOENT', ... }

function candidates() {
	const list = [];
	if (process.env.ASP_LIBRARY)
		list.push(process.env.ASP_LIBRARY);
	list.push(path.resolve(__dirname, '..', '..', 'build', 'libasp.so.0'));
	list.push('libasp.so.0');
	return list;
}

/*
 * libuv reads UV_THREADPOOL_SIZE once, when the first job is queued; queue
 * one now, with the variable set only for that moment so child processes do
 * not inherit it. If the program already used the pool (an ES module import
 * does, to read the files), this changes nothing: set UV_THREADPOOL_SIZE in
 * the environment then (README.md).
 */
function sizeThreadPool() {
	if (process.env.UV_THREADPOOL_SIZE !== undefined)
		return;
	process.env.UV_THREADPOOL_SIZE = String(THREADPOOL_SIZE);
	try {
		fs.access(__filename, () => {});
	} finally {
		delete process.env.UV_THREADPOOL_SIZE;
	}
}

function configureKoffi() {
	const want = {};
	const cfg = koffi.config();
	if (cfg.async_stack_size < ASYNC_STACK_SIZE)
		want.async_stack_size = ASYNC_STACK_SIZE;
	if (cfg.resident_async_pools < RESIDENT_ASYNC_POOLS)
		want.resident_async_pools = RESIDENT_ASYNC_POOLS;
	try {
		if (Object.keys(want).length)
			koffi.config(want);
	} catch (e) {
		/* Another module loaded a library through this koffi first. */
		const size = koffi.config().async_stack_size;
		if (size < MIN_ASYNC_STACK_SIZE)
			process.emitWarning(`koffi's async stack is ${size} bytes and can no longer be changed ` +
				`(${e.message}); libasp calls may overflow it. Require 'libasp' before other ` +
				`modules that load native libraries through koffi.`, 'LibaspWarning');
	}
}

function bind(handle) {
	const t = {};
	t.sandbox = koffi.opaque('asp_sandbox');
	t.cancel = koffi.opaque('asp_cancel');
	t.result = koffi.opaque('asp_exec_result');
	t.list = koffi.opaque('asp_list');
	t.proc = koffi.opaque('asp_proc');
	t.openOptions = koffi.struct('asp_open_options', {
		version: 'uint',
		config_path: 'const char *',
		start_dir: 'const char *',
		known_hosts: 'const char *',
		max_connections: 'uint',
		connect_timeout_ms: 'uint',
		io_timeout_ms: 'uint',
		keepalive_s: 'uint',
		idle_close_s: 'uint',
		flags: 'uint',
		op_timeout_ms: 'uint',
		max_read_bytes: 'uint64_t',
		max_output: 'size_t',
		max_list_entries: 'uint',
		file_transport: 'uint',
		config_text: 'const char *', // version 2
		max_list_bytes: 'uint64_t', // version 2
		log_fn: 'void *', // version 3: left NULL (ASP_DEBUG=1 traces to stderr)
		log_userdata: 'void *', // version 3
		log_level: 'uint', // version 3
	});
	t.callOptions = koffi.struct('asp_call_options', {
		version: 'uint',
		cancel: 'asp_cancel *',
		timeout_ms: 'uint',
	});
	t.writeOptions = koffi.struct('asp_write_options', {
		version: 'uint',
		call: 'asp_call_options', // cancel token and deadline; call.version may stay 0
		mode: 'uint',
		flags: 'uint', // ASP_WRITE_PARENTS, ASP_WRITE_IN_PLACE
	});
	/* userdata is a void * in C; we only ever store a small integer in it. */
	t.outputCb = koffi.proto('int asp_output_cb(int stream, const void *data, size_t len, intptr_t userdata)');
	t.execOptions = koffi.struct('asp_exec_options', {
		version: 'uint',
		call: 'asp_call_options', // cancel token and the call's deadline
		cwd: 'const char *',
		env: 'const char **',
		stdin_data: 'const void *',
		stdin_len: 'size_t',
		kill_after_ms: 'uint', // the command's kill timer: timedOut in the result
		kill_grace_ms: 'uint',
		on_output: 'asp_output_cb *',
		userdata: 'intptr_t',
		max_output: 'size_t',
		stdin_fd: 'int',
		flags: 'uint',
	});
	t.procOptions = koffi.struct('asp_proc_options', {
		version: 'uint',
		call: 'asp_call_options', // cancel token; timeout_ms bounds the start only
		cwd: 'const char *',
		env: 'const char **',
		kill_after_ms: 'uint',
		kill_grace_ms: 'uint',
		max_output: 'size_t',
		flags: 'uint', // ASP_PROC_PTY
		term: 'const char *',
		cols: 'uint',
		rows: 'uint',
	});
	t.statInfo = koffi.struct('asp_stat_info', {
		size: 'uint64_t',
		mtime: 'int64_t',
		mode: 'uint32_t',
		type: 'uint32_t', // an asp_file_type value
		spare: koffi.array('uint64_t', 4),
	});
	t.bgList = koffi.opaque('asp_bg_list');
	t.bgOptions = koffi.struct('asp_bg_options', {
		version: 'uint',
		call: 'asp_call_options',
		name: 'const char *',
		cwd: 'const char *',
		env: 'const char **',
		max_output: 'uint64_t',
	});
	t.bgStatus = koffi.struct('asp_bg_status', {
		state: 'int', // an asp_bg_state value
		exit_code: 'int',
		signal: 'int',
		output_open: 'int',
		output_start: 'uint64_t',
		output_size: 'uint64_t',
		offset: 'uint64_t',
		spare: koffi.array('uint64_t', 4),
	});
	t.bgEntry = koffi.struct('asp_bg_entry', {
		id: 'const char *',
		name: 'const char *',
		command: 'const char *',
		start_ms: 'int64_t',
		pid: 'int64_t',
		status: 'asp_bg_status',
	});
	t.sandboxInfo = koffi.struct('asp_sandbox_info', {
		version: 'uint',
		trust: 'int',
		auth: 'int',
		host_key_type: 'char[32]',
		host_key_fingerprint: 'char[64]',
		known_hosts: 'char[1024]',
		kex: 'char[64]',
		cipher: 'char[128]',
		mac: 'char[128]',
		server_banner: 'char[256]',
		file_transport: 'int',
	});

	/*
	 * The asp_error *err argument is a caller-owned Buffer of
	 * sizeof(asp_error) bytes (int code + char[512]), decoded by hand.
	 */
	const f = (sig) => handle.func(sig);
	return {
		types: t,
		version: f('const char *asp_version(void)'),
		strerror: f('const char *asp_strerror(int code)'),
		errorName: f('const char *asp_error_name(int code)'),
		free: f('void asp_free(void *ptr)'),
		findConfig: f('int asp_config_find(_Out_ void **out, const char *start_dir, void *err)'),
		readConfig: f('int asp_config_read(_Out_ void **text, _Out_ void **path, const char *start_dir, void *err)'),
		checkConfig: f('int asp_config_check(const char *path, void *err)'),
		open: f('int asp_open(_Out_ asp_sandbox **out, const asp_open_options *opts, void *err)'),
		close: f('void asp_close(asp_sandbox *sb)'),
		configPath: f('const char *asp_sandbox_config_path(const asp_sandbox *sb)'),
		workspace: f('const char *asp_sandbox_workspace(const asp_sandbox *sb)'),
		infoGet: f('int asp_sandbox_info_get(_Inout_ asp_sandbox_info *out, asp_sandbox *sb, void *err)'),
		cancelNew: f('int asp_cancel_new(_Out_ asp_cancel **out, void *err)'),
		cancelTrigger: f('void asp_cancel_trigger(asp_cancel *c)'),
		cancelFree: f('void asp_cancel_free(asp_cancel *c)'),
		read: f('int asp_read(_Out_ void **out, _Out_ size_t *out_len, asp_sandbox *sb, const char *path, uint64_t offset, uint64_t limit, const asp_call_options *opts, void *err)'),
		write: f('int asp_write(asp_sandbox *sb, const char *path, const void *data, size_t len, const asp_write_options *opts, void *err)'),
		exec: f('int asp_exec(_Out_ asp_exec_result **out, asp_sandbox *sb, const char *command, const asp_exec_options *opts, void *err)'),
		resExitCode: f('int asp_exec_result_exit_code(const asp_exec_result *r)'),
		resSignal: f('int asp_exec_result_signal(const asp_exec_result *r)'),
		resTimedOut: f('int asp_exec_result_timed_out(const asp_exec_result *r)'),
		resCancelled: f('int asp_exec_result_cancelled(const asp_exec_result *r)'),
		resOutput: f('const void *asp_exec_result_output(const asp_exec_result *r, int stream, _Out_ size_t *len)'),
		resTotal: f('uint64_t asp_exec_result_output_total(const asp_exec_result *r, int stream)'),
		resTruncated: f('int asp_exec_result_truncated(const asp_exec_result *r, int stream)'),
		resDuration: f('uint64_t asp_exec_result_duration_ms(const asp_exec_result *r)'),
		resFree: f('void asp_exec_result_free(asp_exec_result *r)'),
		warm: f('int asp_sandbox_warm(asp_sandbox *sb, unsigned int connections, const asp_call_options *opts, void *err)'),
		stat: f('int asp_stat(_Out_ asp_stat_info *out, asp_sandbox *sb, const char *path, const asp_call_options *opts, void *err)'),
		mkdir: f('int asp_mkdir(asp_sandbox *sb, const char *path, unsigned int mode, unsigned int flags, const asp_call_options *opts, void *err)'),
		remove: f('int asp_remove(asp_sandbox *sb, const char *path, unsigned int flags, const asp_call_options *opts, void *err)'),
		rename: f('int asp_rename(asp_sandbox *sb, const char *from, const char *to, const asp_call_options *opts, void *err)'),
		listDir: f('int asp_list_dir(_Out_ asp_list **out, asp_sandbox *sb, const char *path, const asp_call_options *opts, void *err)'),
		listCount: f('size_t asp_list_count(const asp_list *l)'),
		listName: f('const char *asp_list_name(const asp_list *l, size_t i)'),
		listStat: f('int asp_list_stat(_Out_ asp_stat_info *out, const asp_list *l, size_t i)'),
		listFree: f('void asp_list_free(asp_list *l)'),
		bgStart: f('int asp_bg_start(_Out_ void **id, asp_sandbox *sb, const char *command, const asp_bg_options *opts, void *err)'),
		bgRead: f('int asp_bg_read(_Out_ void **out, _Out_ size_t *out_len, _Out_ asp_bg_status *st, asp_sandbox *sb, const char *id, uint64_t offset, uint64_t limit, const asp_call_options *opts, void *err)'),
		bgSignal: f('int asp_bg_signal(asp_sandbox *sb, const char *id, int sig, const asp_call_options *opts, void *err)'),
		bgWait: f('int asp_bg_wait(_Out_ asp_bg_status *st, asp_sandbox *sb, const char *id, unsigned int timeout_ms, const asp_call_options *opts, void *err)'),
		bgRemove: f('int asp_bg_remove(asp_sandbox *sb, const char *id, const asp_call_options *opts, void *err)'),
		bgListAll: f('int asp_bg_list_all(_Out_ asp_bg_list **out, asp_sandbox *sb, const asp_call_options *opts, void *err)'),
		bgListCount: f('size_t asp_bg_list_count(const asp_bg_list *l)'),
		bgListGet: f('const asp_bg_entry *asp_bg_list_get(const asp_bg_list *l, size_t i)'),
		bgListFree: f('void asp_bg_list_free(asp_bg_list *l)'),
		procStart: f('int asp_proc_start(_Out_ asp_proc **out, asp_sandbox *sb, const char *command, const asp_proc_options *opts, void *err)'),
		procWrite: f('int asp_proc_write(asp_proc *p, const void *data, size_t len, void *err)'),
		procCloseStdin: f('int asp_proc_close_stdin(asp_proc *p, void *err)'),
		procRead: f('int asp_proc_read(_Out_ size_t *out_len, _Out_ int *stream, asp_proc *p, void *buf, size_t cap, int timeout_ms, void *err)'),
		procSignal: f('int asp_proc_signal(asp_proc *p, const char *signal, void *err)'),
		procResize: f('int asp_proc_resize(asp_proc *p, unsigned int cols, unsigned int rows, void *err)'),
		procWait: f('int asp_proc_wait(_Out_ asp_exec_result **out, asp_proc *p, int timeout_ms, void *err)'),
		procFree: f('void asp_proc_free(asp_proc *p)'),
		/* procs is a Buffer of pointers (koffi.address): no copy, and no bound on how many. */
		procWaitAny: f('int asp_proc_wait_any(void *index, void *procs, size_t n, int timeout_ms, asp_cancel *wake, void *err)'),
		cancelReset: f('void asp_cancel_reset(asp_cancel *c)'),
	};
}

/** Load the shared library (done on first use). Returns the path that loaded. */
function load() {
	if (lib)
		return libraryPath;
	configureKoffi();
	const tried = [];
	for (const candidate of candidates()) {
		/* A path is only worth trying if it exists; a bare name goes to the loader. */
		if (candidate.includes('/') && !fs.existsSync(candidate)) {
			tried.push(`${candidate}: not found`);
			continue;
		}
		let handle;
		try {
			handle = koffi.load(candidate);
		} catch (e) {
			tried.push(`${candidate}: ${e.message}`);
			continue;
		}
		lib = bind(handle);
		libraryPath = candidate;
		loadCodes();
		return libraryPath;
	}
	throw new Error(`libasp: cannot load the shared library (set ASP_LIBRARY, run \`make lib\`, ` +
		`or install libasp.so.0):\n  ${tried.join('\n  ')}`);
}

/* Names of every code, asked from the library itself (asp_error_name). */
function loadCodes() {
	codes = {};
	codeNames = {};
	for (let c = 0; ; c--) {
		const name = lib.errorName(c);
		if (name === 'ASP_UNKNOWN' || !name) {
			if (c <= KNOWN_LAST_CODE - 1)
				break;
			continue; // never expected: a gap below the last known code
		}
		codes[name] = c;
		codeNames[c] = name;
	}
	Object.freeze(codes);
}

function codeName(errno) {
	try {
		load();
	} catch {
		return `ASP_${errno}`;
	}
	return codeNames[errno] || lib.errorName(errno);
}

function strerror(errno) {
	try {
		load();
	} catch {
		return 'error';
	}
	return lib.strerror(errno);
}

/* ------------------------------------------------------------ marshalling */

/* asp_error: int code, char message[ERROR_MESSAGE_MAX], uint32_t spare[4]. */
function newErr() {
	return Buffer.alloc(4 + ERROR_MESSAGE_MAX + 16);
}

/* libasp's messages name C fields; ours name this binding's options. */
const C_WORDS = [
	['(asp_call_options.timeout_ms, or asp_open_options.op_timeout_ms)',
		'(the call\'s timeout, exec\'s deadline, or open\'s opTimeout)'],
	['(asp_exec_options.call.timeout_ms)', '(exec\'s deadline option)'],
	['asp_open_options.op_timeout_ms', 'open\'s opTimeout'],
	['asp_open_options.max_read_bytes', 'open\'s maxReadBytes'],
	['asp_open_options.max_list_bytes', 'open\'s maxListBytes'],
	['asp_open_options.max_list_entries', 'open\'s maxListEntries'],
	['asp_open_options.max_connections', 'open\'s maxConnections'],
	['asp_open_options.file_transport', 'open\'s fileTransport'],
	['asp_exec_options.stdin_fd', 'stdin'],
	['through stdin_data', 'through exec\'s stdin option'],
];

function bindingWords(message) {
	for (const [cWords, ours] of C_WORDS)
		message = message.split(cWords).join(ours);
	return message;
}

function errorFrom(rc, errBuf) {
	let message = '';
	if (errBuf && errBuf.readInt32LE(0) === rc) {
		const end = errBuf.indexOf(0, 4);
		message = bindingWords(errBuf.toString('utf8', 4, end < 0 ? errBuf.length : end));
	}
	return new AspError(rc, message || `${codeName(rc)}: ${strerror(rc)}`);
}

function einval(message) {
	return new AspError(ASP_EINVAL, message);
}

/*
 * A C string argument as a NUL-terminated Buffer. Strings are UTF-8;
 * a Buffer/Uint8Array passes its bytes as they are (non-UTF-8 names).
 * Passing Buffers also keeps koffi from copying strings into its small
 * per-call heap.
 */
function cstr(value, what) {
	let bytes;
	if (typeof value === 'string')
		bytes = Buffer.from(value, 'utf8');
	else if (value instanceof Uint8Array)
		bytes = Buffer.from(value.buffer, value.byteOffset, value.byteLength);
	else
		throw new TypeError(`${what} must be a string or a Buffer, got ${value === null ? 'null' : typeof value}`);
	if (bytes.includes(0))
		throw einval(`${what} contains a NUL byte`);
	const out = Buffer.allocUnsafe(bytes.length + 1);
	bytes.copy(out);
	out[bytes.length] = 0;
	return out;
}

function optCstr(value, what) {
	return value === undefined || value === null ? null : cstr(value, what);
}

function bytesOf(value, what) {
	if (typeof value === 'string')
		return Buffer.from(value, 'utf8');
	if (value instanceof Uint8Array)
		return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
	if (value === undefined || value === null)
		return Buffer.alloc(0);
	throw new TypeError(`${what} must be a string or a Buffer`);
}

function uint(value, what, max = 0xffffffff) {
	if (value === undefined || value === null)
		return 0;
	if (typeof value !== 'number' || !Number.isFinite(value) || value < 0)
		throw new RangeError(`${what} must be a non-negative number, got ${String(value)}`);
	const n = Math.ceil(value);
	if (n > max)
		throw new RangeError(`${what} must be at most ${max}, got ${value}`);
	return n;
}

function u64(value, what, dflt) {
	if (value === undefined || value === null)
		return dflt;
	if (typeof value === 'bigint') {
		if (value < 0n || value > READ_ALL)
			throw new RangeError(`${what} is out of range`);
		return value;
	}
	if (typeof value === 'number' && Number.isFinite(value) && value >= 0)
		return BigInt(Math.floor(value));
	if (value === Infinity)
		return READ_ALL;
	throw new RangeError(`${what} must be a non-negative number or bigint, got ${String(value)}`);
}

/*
 * Fresh memory of megabytes costs a page fault per 4 KiB page as it is
 * first written: copying a 64 MiB read into a new Buffer took about 0.2 s
 * of faults on the benchmark VM, as long as the transfer. So a large result
 * is copied into a Buffer whose pages are asked to be huge, as the C
 * library does for its own buffer (common.c asp__mem_fill_hint).
 */
const LARGE = 4 << 20; /* common.h ASP_MEM_LARGE */
const HUGE = 2n << 20n;
const MADV_HUGEPAGE = 14; /* Linux */
let libc; /* { addressOf, madvise }, null where unavailable; loaded on first use */

/* The address of buf's first byte (0n when libc's symbols cannot be reached). */
function bufferAddress(buf) {
	if (libc === undefined) {
		libc = null;
		try {
			const self = koffi.load(null);
			libc = {
				/* memmove(p, p, 0) moves nothing and returns p. */
				addressOf: self.func('uintptr_t memmove(void *dst, const void *src, size_t n)'),
				madvise: self.func('int madvise(uintptr_t addr, size_t len, int advice)'),
			};
		} catch {
			/* no advice */
		}
	}
	return libc ? BigInt(libc.addressOf(buf, buf, 0)) : 0n;
}

/* Ask for huge pages over the 2 MiB-aligned part of buf: advice only. */
function hugePageHint(buf) {
	const p = bufferAddress(buf);
	const a = (p + HUGE - 1n) & ~(HUGE - 1n);
	const e = (p + BigInt(buf.length)) & ~(HUGE - 1n);
	if (p && e > a)
		libc.madvise(a, Number(e - a), MADV_HUGEPAGE);
}

function copyOut(ptr, len) {
	if (!ptr || !len)
		return Buffer.alloc(0);
	/* koffi.view aliases C memory; the copy out of it is the caller's Buffer. */
	const src = new Uint8Array(koffi.view(ptr, len));
	if (len < LARGE)
		return Buffer.from(src);
	const dst = Buffer.allocUnsafeSlow(len); /* every byte is set just below */
	hugePageHint(dst);
	dst.set(src);
	return dst;
}

function statFrom(st) {
	const mtimeMs = Number(st.mtime) * 1000;
	return {
		type: TYPE_NAMES[st.type] || 'other',
		size: Number(st.size),
		mode: st.mode,
		mtime: new Date(mtimeMs),
		mtimeMs,
	};
}

function signalName(num) {
	if (!num)
		return null;
	for (const [name, n] of Object.entries(os.constants.signals))
		if (n === num)
			return name;
	return `SIG${num}`;
}

/*
 * Run a bound function on a worker thread; resolve with its int result.
 * koffi passes a Buffer argument (or a Buffer inside a struct) as a pointer
 * to its memory and keeps no reference to it, so the completion callback
 * holds `args`: nothing the worker reads can be collected before it is done.
 */
function callAsync(fn, ...args) {
	return new Promise((resolve, reject) => {
		startAsync(fn, args, (err, rc) => {
			if (args.length < 0)
				throw new Error('unreachable'); // keeps args alive until completion
			return err ? reject(err) : resolve(rc);
		});
	});
}

/*
 * koffi refuses an async call ("Too many asynchronous calls are running")
 * once max_async_calls (256 by default) are running or queued in it, and it
 * takes a memory (stack + heap) from the same count for each callback a
 * worker thread relays to the main thread (exec's output). So 500 sandboxes
 * opened at once made the 257th open throw. The binding hands koffi at most
 * half its limit (the other half is left for the relays and for other
 * modules that share koffi) and queues the rest here, in order; a queued call
 * holds no thread and no koffi memory. The limit stays above the libuv pool
 * size (64 unless UV_THREADPOOL_SIZE says otherwise), where calls queue
 * anyway, so this costs no concurrency.
 */
const asyncQueue = [];
let asyncRunning = 0;
let asyncLimit = 0;

function startAsync(fn, args, done) {
	if (!asyncLimit)
		asyncLimit = Math.max(1, Math.floor((koffi.config().max_async_calls || 256) / 2));
	if (asyncRunning >= asyncLimit) {
		asyncQueue.push([fn, args, done]);
		return;
	}
	asyncRunning++;
	let ended = false;
	const end = (err, rc) => {
		if (ended)
			return;
		ended = true;
		asyncRunning--;
		if (asyncQueue.length) {
			const [f, a, d] = asyncQueue.shift();
			startAsync(f, a, d);
		}
		done(err, rc);
	};
	try {
		fn.async(...args, end);
	} catch (e) {
		end(e);
	}
}

/* ------------------------------------------------------------ exec streaming */

/*
 * One registered callback for the life of the process. The C side calls it
 * on the worker thread that runs asp_exec; koffi queues the call to the main
 * thread and the worker waits for it, so chunks arrive in order, before the
 * exec's promise settles. `userdata` carries the id of the running exec.
 */
const streams = new Map(); // id -> { onData, fail }
let nextStreamId = 1;
let outputCbPtr = null;

function outputCallback() {
	if (!outputCbPtr) {
		outputCbPtr = koffi.register((stream, data, len, id) => {
			const s = streams.get(Number(id));
			if (!s || s.failed)
				return 0;
			try {
				s.onData(stream === ASP_STDERR ? 'stderr' : 'stdout', copyOut(data, Number(len)));
			} catch (e) {
				s.fail(e);
			}
			/* Always 0: stopping goes through the cancel token (see fail). */
			return 0;
		}, koffi.pointer(lib.types.outputCb));
	}
	return outputCbPtr;
}

/* NAME=value C strings of an env object (undefined values left out). */
function envArray(envObj) {
	const env = [];
	if (envObj !== undefined && envObj !== null) {
		if (typeof envObj !== 'object')
			throw new TypeError('env must be an object of NAME: value');
		for (const [name, value] of Object.entries(envObj)) {
			if (value === undefined)
				continue;
			if (name.includes('='))
				throw einval(`env name ${JSON.stringify(name)} contains '='`);
			const v = typeof value === 'string' || value instanceof Uint8Array ? value : String(value);
			env.push(cstr(Buffer.concat([Buffer.from(`${name}=`, 'utf8'), bytesOf(v, `env ${name}`)]),
				`env ${name}`));
		}
	}
	return env;
}

/* An asp_exec_result as exec() returns it (r stays the caller's to free). */
function execResult(r) {
	const olen = [0];
	const stdout = copyOut(lib.resOutput(r, ASP_STDOUT, olen), Number(olen[0]));
	const elen = [0];
	const stderr = copyOut(lib.resOutput(r, ASP_STDERR, elen), Number(elen[0]));
	const sig = lib.resSignal(r);
	return {
		exitCode: sig ? null : lib.resExitCode(r),
		signal: signalName(sig),
		stdout,
		stderr,
		timedOut: !!lib.resTimedOut(r),
		cancelled: !!lib.resCancelled(r),
		durationMs: Number(lib.resDuration(r)),
		stdoutTotal: Number(lib.resTotal(r, ASP_STDOUT)),
		stderrTotal: Number(lib.resTotal(r, ASP_STDERR)),
		truncated: !!(lib.resTruncated(r, ASP_STDOUT) || lib.resTruncated(r, ASP_STDERR)),
	};
}

/* ------------------------------------------------------------ the waiter */

/*
 * exec() without onData, stdin or deadline starts its command with
 * asp_proc_start (one round trip on a worker) and then waits here: one
 * asp_proc_wait_any call, on one worker, waits for every such command of the
 * process at once (driving them: output to the result, kill timers, cancel
 * tokens). So a thousand running commands hold one libuv thread, not a
 * thousand (the pool has 64: the 65th exec would wait for a thread, not for
 * its command). A command joining triggers `wake`, which makes the call
 * return ASP_ECANCELLED; the next round re-arms it before it reads the list,
 * all on the main thread, so no join is missed. A command that ended is taken
 * on the main thread: its result is ready (asp_proc_wait with 0 is a look
 * that returns at once) and freeing an ended proc is memory only.
 */
const waiter = { procs: new Map(), wake: null, running: false };
const NO_INDEX = 0xffffffffffffffffn;

/* Resolves with the command's result (asp_exec_result, the caller's to free) or rejects. */
function waitEnded(p) {
	return new Promise((resolve, reject) => {
		waiter.procs.set(p, { resolve, reject });
		if (waiter.running)
			lib.cancelTrigger(waiter.wake);
		else
			waitRound();
	});
}

function waitRound() {
	if (!waiter.procs.size) {
		waiter.running = false;
		return;
	}
	if (!waiter.wake) {
		const out = [null];
		const err = newErr();
		const rc = lib.cancelNew(out, err);
		if (rc)
			return failWaiting([...waiter.procs.keys()], errorFrom(rc, err));
		waiter.wake = out[0];
	}
	waiter.running = true;
	lib.cancelReset(waiter.wake);
	const list = [...waiter.procs.keys()];
	const ptrs = Buffer.alloc(8 * list.length);
	list.forEach((p, i) => ptrs.writeBigUInt64LE(BigInt(koffi.address(p)), 8 * i));
	const index = Buffer.alloc(8);
	index.writeBigUInt64LE(NO_INDEX);
	const err = newErr();
	callAsync(lib.procWaitAny, index, ptrs, list.length, -1, waiter.wake, err).then((rc) => {
		const i = index.readBigUInt64LE();
		if (rc === 0)
			takeEnded(list[Number(i)]);
		else if (rc !== ASP_ECANCELLED)
			failWaiting(i === NO_INDEX ? list : [list[Number(i)]], errorFrom(rc, err));
		waitRound();
	}, (e) => {
		failWaiting(list, e);
		waitRound();
	});
}

function takeEnded(p) {
	const w = waiter.procs.get(p);
	waiter.procs.delete(p);
	const out = [null];
	const err = newErr();
	const rc = lib.procWait(out, p, 0, err);
	lib.procFree(p); // ended: frees memory, no I/O
	if (rc)
		w.reject(errorFrom(rc, err));
	else
		w.resolve(out[0]);
}

/* The wait itself failed (out of memory), or one command's part of it: fail their execs. */
function failWaiting(list, e) {
	for (const p of list) {
		const w = waiter.procs.get(p);
		waiter.procs.delete(p);
		/* Still running: free kills it and waits for that, so on a worker. */
		callAsync(lib.procFree, p).finally(() => w.reject(e));
	}
}

/* ------------------------------------------------------------ running commands with a handle */

/*
 * Run body(owner._h) as one of owner's tracked calls (owner._inflight), so
 * that its close() can wait for it; refused once owner is closed.
 */
function runTracked(owner, what, noun, body) {
	if (owner.closed)
		return Promise.reject(einval(`${what}: the ${noun} is closed`));
	let p;
	try {
		p = body(owner._h);
	} catch (e) {
		return Promise.reject(e);
	}
	owner._inflight.add(p);
	const done = () => owner._inflight.delete(p);
	p.then(done, done);
	return p;
}


const PROC_SLICE_MS = 200; // a read or wait returns to JS this often (close() need not wait long)

/*
 * A running command (asp_proc), from Sandbox.start. Each call runs on a
 * libuv worker; a read or a wait waits there in slices, so that close()
 * (which kills the command) never waits long for them.
 */
class Process {
	constructor(sandbox, handle, token, onAbort, signal, pty) {
		this._sb = sandbox;
		this._h = handle;
		this._token = token;
		this._onAbort = onAbort;
		this._signal = signal;
		this._inflight = new Set();
		this._closing = null;
		this._result = null;
		/** True when the command runs on a pseudo-terminal. */
		this.pty = pty;
	}

	get closed() {
		return this._h === CLOSED || this._closing !== null;
	}

	_run(what, body) {
		return runTracked(this, what, 'process', body);
	}

	/** Send bytes (or a string, as UTF-8) to stdin; resolves once sent, never waits for a reply. */
	async write(data) {
		const buf = bytesOf(data, 'data');
		return this._run('write', async (h) => {
			const err = newErr();
			const rc = await callAsync(lib.procWrite, h, buf, buf.length, err);
			if (rc)
				throw errorFrom(rc, err);
		});
	}

	/** EOF on stdin after what was written. */
	async closeStdin() {
		return this._run('closeStdin', async (h) => {
			const err = newErr();
			const rc = await callAsync(lib.procCloseStdin, h, err);
			if (rc)
				throw errorFrom(rc, err);
		});
	}

	/**
	 * The next output: { stream: 'stdout' | 'stderr', data: Buffer }, or null at the end.
	 * timeout (ms; default none, 0: what is there): an ASP_ETIMEOUT AspError when nothing came.
	 */
	async read(opts = {}) {
		checkKeys('procRead', opts);
		const limit = opts.timeout === undefined || opts.timeout === null ? null : uint(opts.timeout, 'timeout', 0x7fffffff);
		const size = opts.size === undefined ? 65536 : uint(opts.size, 'size', 0x7fffffff);
		if (!size)
			throw einval('read: size must be at least 1');
		return this._run('read', async (h) => {
			const buf = Buffer.alloc(size);
			const start = Date.now();
			for (;;) {
				const left = limit === null ? PROC_SLICE_MS : Math.max(0, Math.min(PROC_SLICE_MS, limit - (Date.now() - start)));
				const err = newErr();
				const got = [0];
				const stream = [0];
				const rc = await callAsync(lib.procRead, got, stream, h, buf, size, left, err);
				if (rc === ASP_ETIMEOUT && (limit === null || Date.now() - start < limit) && !this._closing)
					continue;
				if (rc)
					throw errorFrom(rc, err);
				const n = Number(got[0]);
				if (!n)
					return null;
				return { stream: stream[0] === ASP_STDERR ? 'stderr' : 'stdout', data: Buffer.from(buf.subarray(0, n)) };
			}
		});
	}

	async *[Symbol.asyncIterator]() {
		for (;;) {
			const chunk = await this.read();
			if (chunk === null)
				return;
			yield chunk;
		}
	}

	/** Send a signal by name ('SIGTERM', 'TERM', 'SIGINT', ...) to the command's process group. */
	async kill(sig = 'SIGTERM') {
		if (typeof sig === 'number') {
			const name = signalName(sig);
			if (!name || name.startsWith('SIG') === false || /^SIG\d+$/.test(name))
				throw einval(`kill: signal ${sig} is not a signal number`);
			sig = name;
		}
		const name = cstr(sig, 'signal');
		return this._run('kill', async (h) => {
			const err = newErr();
			const rc = await callAsync(lib.procSignal, h, name, err);
			if (rc)
				throw errorFrom(rc, err);
		});
	}

	/** The terminal's new size (pty only). */
	async resize(cols, rows) {
		const c = uint(cols, 'cols');
		const r = uint(rows, 'rows');
		return this._run('resize', async (h) => {
			const err = newErr();
			const rc = await callAsync(lib.procResize, h, c, r, err);
			if (rc)
				throw errorFrom(rc, err);
		});
	}

	/**
	 * The result once the command ended (exec()'s shape; the same object on every call);
	 * timeout (ms): an ASP_ETIMEOUT AspError while it still runs.
	 */
	async wait(opts = {}) {
		checkKeys('procWait', opts);
		const limit = opts.timeout === undefined || opts.timeout === null ? null : uint(opts.timeout, 'timeout', 0x7fffffff);
		if (this._result)
			return this._result;
		return this._run('wait', async (h) => {
			const start = Date.now();
			for (;;) {
				if (this._result)
					return this._result;
				const left = limit === null ? PROC_SLICE_MS : Math.max(0, Math.min(PROC_SLICE_MS, limit - (Date.now() - start)));
				const err = newErr();
				const out = [null];
				const rc = await callAsync(lib.procWait, out, h, left, err);
				if (!rc) {
					try {
						this._result = execResult(out[0]);
					} finally {
						lib.resFree(out[0]);
					}
					return this._result;
				}
				if (rc === ASP_ETIMEOUT && (limit === null || Date.now() - start < limit) && !this._closing)
					continue;
				if (this._result)
					return this._result;
				throw errorFrom(rc, err);
			}
		});
	}

	/** Kill the command if it still runs (its whole process group) and free the handle. */
	close() {
		if (this._h === CLOSED)
			return Promise.resolve();
		if (this._closing)
			return this._closing;
		const h = this._h;
		this._closing = (async () => {
			await Promise.allSettled([...this._inflight]);
			await new Promise((resolve, reject) =>
				startAsync(lib.procFree, [h], (e) => (e ? reject(e) : resolve())));
			this._h = CLOSED;
			if (this._onAbort)
				this._signal.removeEventListener('abort', this._onAbort);
			if (this._token)
				lib.cancelFree(this._token);
			this._sb._procs.delete(this);
		})();
		return this._closing;
	}

	async [Symbol.asyncDispose]() {
		await this.close();
	}
}

/* ------------------------------------------------------------ the sandbox */

const CLOSED = Symbol('closed');

/*
 * The option keys each call takes. A key not listed is refused with a
 * TypeError naming it, before anything runs: a misspelt `timeout` would
 * otherwise run the command with no timeout at all.
 */
const CALL_KEYS = ['signal', 'timeout'];
const OPTION_KEYS = {
	open: ['config', 'configText', 'startDir', 'knownHosts', 'maxConnections', 'connectTimeout', 'ioTimeout',
		'keepalive', 'idleClose', 'lazy', 'opTimeout', 'maxReadBytes', 'maxOutput', 'maxListEntries',
		'maxListBytes', 'fileTransport'],
	read: [...CALL_KEYS, 'offset', 'limit'],
	write: [...CALL_KEYS, 'mode', 'parents', 'atomic'],
	exec: ['cwd', 'env', 'stdin', 'timeout', 'signal', 'onData', 'maxOutput', 'killGrace', 'deadline'],
	start: ['cwd', 'env', 'timeout', 'signal', 'maxOutput', 'killGrace', 'deadline', 'pty', 'term', 'cols', 'rows'],
	procRead: ['timeout', 'size'],
	procWait: ['timeout'],
	stat: CALL_KEYS,
	mkdir: [...CALL_KEYS, 'mode', 'parents'],
	list: CALL_KEYS,
	remove: [...CALL_KEYS, 'recursive'],
	rename: CALL_KEYS,
	warm: CALL_KEYS,
	bgStart: [...CALL_KEYS, 'name', 'cwd', 'env', 'keep'],
	bgRead: [...CALL_KEYS, 'offset', 'limit'],
	bgSignal: CALL_KEYS,
	bgWait: ['signal', 'timeout'],
	bgRemove: CALL_KEYS,
	bgList: CALL_KEYS,
};

const BG_STATES = { 1: 'running', 2: 'exited', 3: 'lost' };

function bgStatusFrom(st) {
	const exited = st.state === 2;
	return {
		state: BG_STATES[st.state] || 'lost',
		exitCode: exited && !st.signal ? st.exit_code : null,
		signal: st.signal ? signalName(st.signal) : null,
		outputOpen: st.output_open !== 0,
		outputStart: Number(st.output_start),
		outputSize: Number(st.output_size),
	};
}

function bgId(id) {
	if (typeof id !== 'string')
		throw new TypeError('id must be a string');
	return cstr(id, 'id');
}

function checkKeys(what, opts) {
	if (opts === null || typeof opts !== 'object')
		throw new TypeError(`${what}: options must be an object`);
	const known = OPTION_KEYS[what];
	for (const key of Object.keys(opts)) {
		if (!known.includes(key))
			throw new TypeError(`${what}: unknown option '${key}' (${what} takes ${known.join(', ')})`);
	}
}

/*
 * { token, onAbort }: an asp_cancel that signal's abort triggers (its
 * listener added), or nulls without a signal. The caller removes the
 * listener and frees the token.
 */
function signalToken(signal) {
	if (!signal)
		return { token: null, onAbort: null };
	const out = [null];
	const err = newErr();
	const rc = lib.cancelNew(out, err);
	if (rc)
		throw errorFrom(rc, err);
	const token = out[0];
	const onAbort = () => lib.cancelTrigger(token);
	signal.addEventListener('abort', onAbort, { once: true });
	return { token, onAbort };
}

/* A file call's { signal, timeout }, checked before the call starts. */
function callSpec(what, opts) {
	if (opts === null || typeof opts !== 'object')
		throw new TypeError(`${what}: options must be an object`);
	const signal = opts.signal;
	if (signal !== undefined && signal !== null &&
	    (typeof signal !== 'object' || typeof signal.addEventListener !== 'function'))
		throw new TypeError('signal must be an AbortSignal');
	if (signal && signal.aborted)
		throw new AspError(ASP_ECANCELLED, `${what}: cancelled before it started (the AbortSignal was already aborted)`, { cause: signal.reason });
	return { signal: signal || null, timeout: uint(opts.timeout, 'timeout') };
}

/*
 * Run fn with the asp_call_options for spec (null when it sets nothing):
 * an AbortSignal triggers a cancel token that lives as long as the call.
 */
async function withCall(spec, fn) {
	if (!spec.signal && !spec.timeout)
		return fn(null);
	let token = null;
	let onAbort = null;
	try {
		({ token, onAbort } = signalToken(spec.signal));
		return await fn({ version: CALL_OPTIONS_VERSION, cancel: token, timeout_ms: spec.timeout });
	} finally {
		if (onAbort)
			spec.signal.removeEventListener('abort', onAbort);
		if (token)
			lib.cancelFree(token);
	}
}

class Sandbox {
	constructor(handle, maxConnections) {
		this._h = handle;
		this._inflight = new Set();
		this._procs = new Set();
		this._closing = null;
		this._execsMax = maxConnections || DEFAULT_CONNECTIONS;
		this._execsRunning = 0;
		this._execsQueued = [];
		/** Absolute path of the .asp.json in use. */
		this.configPath = lib.configPath(handle);
		/** The sandbox workspace (absolute path in the sandbox). */
		this.workspace = lib.workspace(handle);
	}

	get closed() {
		return this._h === CLOSED || this._closing !== null;
	}

	/*
	 * Track an operation so close() can wait for it (asp_close must not race
	 * with calls). The methods are async functions, so bad arguments reject;
	 * they call _run before their first await, so tracking starts at the call.
	 */
	_run(what, body) {
		return runTracked(this, what, 'sandbox', body);
	}

	/**
	 * Read bytes from a file: the whole file, or `limit` bytes from `offset`.
	 * Like every file call, takes `signal` (an AbortSignal) and `timeout`
	 * (the call's overall deadline, ms) in its options.
	 */
	async read(file, opts = {}) {
		checkKeys('read', opts);
		const p = cstr(file, 'path');
		const offset = u64(opts.offset, 'offset', 0n);
		const limit = u64(opts.limit, 'limit', READ_ALL);
		const call = callSpec('read', opts);
		return this._run('read', (h) => withCall(call, async (co) => {
			const out = [null];
			const len = [0];
			const err = newErr();
			const rc = await callAsync(lib.read, out, len, h, p, offset, limit, co, err);
			if (rc)
				throw errorFrom(rc, err);
			try {
				return copyOut(out[0], Number(len[0]));
			} finally {
				lib.free(out[0]);
			}
		}));
	}

	/** Create or replace a file (atomically by default). */
	async write(file, data, opts = {}) {
		checkKeys('write', opts);
		const p = cstr(file, 'path');
		const bytes = bytesOf(data, 'data');
		const o = {
			version: WRITE_OPTIONS_VERSION,
			call: { version: 0, cancel: null, timeout_ms: 0 },
			mode: uint(opts.mode, 'mode', 0o7777),
			flags: (opts.parents ? ASP_WRITE_PARENTS : 0) |
				(opts.atomic === undefined || opts.atomic ? 0 : ASP_WRITE_IN_PLACE),
		};
		const call = callSpec('write', opts);
		return this._run('write', (h) => withCall(call, async (co) => {
			const err = newErr();
			if (co)
				o.call = co;
			/* A zero-length Buffer may have no memory behind it: libasp accepts NULL with len 0. */
			const rc = await callAsync(lib.write, h, p, bytes.length ? bytes : null, bytes.length, o, err);
			if (rc)
				throw errorFrom(rc, err);
		}));
	}

	/** Run shell text in a fresh shell in the sandbox. */
	async exec(command, opts = {}) {
		checkKeys('exec', opts);
		const cmd = cstr(command, 'command');
		const cwd = optCstr(opts.cwd, 'cwd');
		const env = envArray(opts.env);
		const stdin = bytesOf(opts.stdin, 'stdin');
		const timeout = uint(opts.timeout, 'timeout');
		const deadline = uint(opts.deadline, 'deadline');
		const killGrace = uint(opts.killGrace, 'killGrace');
		const maxOutput = uint(opts.maxOutput, 'maxOutput', Number.MAX_SAFE_INTEGER);
		const signal = opts.signal;
		const onData = opts.onData;
		if (onData !== undefined && typeof onData !== 'function')
			throw new TypeError('onData must be a function');
		if (signal !== undefined && signal !== null &&
		    (typeof signal !== 'object' || typeof signal.addEventListener !== 'function'))
			throw new TypeError('signal must be an AbortSignal');
		if (signal && signal.aborted)
			throw new AspError(ASP_ECANCELLED, 'exec: cancelled before it started (the AbortSignal was already aborted)', { cause: signal.reason });

		if (!onData && !stdin.length && !deadline)
			return this._run('exec', (h) => this._execWaited(h, cmd, {
				cwd, env, timeout, killGrace, maxOutput, signal }));
		return this._run('exec', async (h) => {
			let token = null;
			let streamId = 0;
			let callbackError = null;
			let onAbort = null;
			const err = newErr();
			try {
				if (signal || onData) {
					const out = [null];
					const rc = lib.cancelNew(out, err);
					if (rc)
						throw errorFrom(rc, err);
					token = out[0];
				}
				if (signal) {
					onAbort = () => lib.cancelTrigger(token);
					signal.addEventListener('abort', onAbort, { once: true });
				}
				if (onData) {
					streamId = nextStreamId++;
					const entry = {
						onData,
						failed: false,
						fail: (e) => {
							/* An exception in onData stops the command and rejects the exec. */
							entry.failed = true;
							callbackError = e;
							lib.cancelTrigger(token);
						},
					};
					streams.set(streamId, entry);
				}
				const o = {
					version: EXEC_OPTIONS_VERSION,
					cwd,
					env: env.length ? [...env, null] : null,
					stdin_data: stdin.length ? stdin : null,
					stdin_len: stdin.length,
					call: { version: 0, cancel: token, timeout_ms: deadline },
					kill_after_ms: timeout,
					kill_grace_ms: killGrace,
					on_output: onData ? outputCallback() : null,
					userdata: streamId,
					max_output: maxOutput,
					stdin_fd: 0, // ignored: flags has no ASP_EXEC_STDIN_FD
					flags: 0,
				};
				const out = [null];
				const rc = await callAsync(lib.exec, out, h, cmd, o, err);
				if (rc)
					throw errorFrom(rc, err);
				const r = out[0];
				try {
					if (callbackError)
						throw callbackError;
					return execResult(r);
				} finally {
					lib.resFree(r);
				}
			} finally {
				if (onAbort)
					signal.removeEventListener('abort', onAbort);
				if (streamId)
					streams.delete(streamId);
				if (token)
					lib.cancelFree(token);
			}
		});
	}

	/*
	 * exec without a thread while the command runs (see the waiter): the
	 * start on a worker, stdin closed at once (exec without stdin gives end of
	 * input; a proc's stays open), then the waiter. At most maxConnections of
	 * this handle's commands run so at once, as asp_exec's would (more would
	 * open more channels on a connection than the server's MaxSessions).
	 */
	async _execWaited(h, cmd, o) {
		await this._execSlot(o.signal);
		let token = null;
		let onAbort = null;
		try {
			const err = newErr();
			({ token, onAbort } = signalToken(o.signal));
			const po = {
				version: PROC_OPTIONS_VERSION,
				call: { version: 0, cancel: token, timeout_ms: 0 },
				cwd: o.cwd,
				env: o.env.length ? [...o.env, null] : null,
				kill_after_ms: o.timeout,
				kill_grace_ms: o.killGrace,
				max_output: o.maxOutput,
				flags: 0,
				term: null,
				cols: 0,
				rows: 0,
			};
			const out = [null];
			let rc = await callAsync(lib.procStart, out, h, cmd, po, err);
			if (rc)
				throw errorFrom(rc, err);
			const p = out[0];
			rc = await callAsync(lib.procCloseStdin, p, err);
			if (rc) {
				await callAsync(lib.procFree, p);
				throw errorFrom(rc, err);
			}
			const r = await waitEnded(p);
			try {
				return execResult(r);
			} finally {
				lib.resFree(r);
			}
		} finally {
			if (onAbort)
				o.signal.removeEventListener('abort', onAbort);
			if (token)
				lib.cancelFree(token);
			this._execSlotFree();
		}
	}

	/* A turn among this handle's waited execs; an AbortSignal ends the wait for one. */
	_execSlot(signal) {
		if (this._execsRunning < this._execsMax) {
			this._execsRunning++;
			return Promise.resolve();
		}
		return new Promise((resolve, reject) => {
			const onAbort = () => {
				this._execsQueued.splice(this._execsQueued.indexOf(turn), 1);
				reject(new AspError(ASP_ECANCELLED, 'exec: cancelled while it waited for its turn (maxConnections ' +
					`commands of this sandbox were running)`, { cause: signal.reason }));
			};
			const turn = () => {
				if (signal)
					signal.removeEventListener('abort', onAbort);
				resolve();
			};
			if (signal)
				signal.addEventListener('abort', onAbort, { once: true });
			this._execsQueued.push(turn);
		});
	}

	_execSlotFree() {
		const next = this._execsQueued.shift();
		if (next)
			next();
		else
			this._execsRunning--;
	}

	/**
	 * Start shell text `command` in the background (under bash, in a process
	 * group of its own); resolves to its id at once. It outlives this call, the
	 * connection and this process: a later handle finds it by id.
	 * Options: name (a label), cwd, env, keep (bytes of output kept; 1 MiB).
	 */
	async bgStart(command, opts = {}) {
		checkKeys('bgStart', opts);
		const cmd = cstr(command, 'command');
		const name = optCstr(opts.name, 'name');
		const cwd = optCstr(opts.cwd, 'cwd');
		const env = envArray(opts.env);
		const keep = u64(opts.keep, 'keep', 0n);
		const call = callSpec('bgStart', opts);
		return this._run('bgStart', (h) => withCall(call, async (co) => {
			const o = {
				version: 1,
				call: co || { version: 0, cancel: null, timeout_ms: 0 },
				name,
				cwd,
				env: env.length ? [...env, null] : null,
				max_output: keep,
			};
			const out = [null];
			const err = newErr();
			const rc = await callAsync(lib.bgStart, out, h, cmd, o, err);
			if (rc)
				throw errorFrom(rc, err);
			try {
				return koffi.decode(out[0], 'char', -1);
			} finally {
				lib.free(out[0]);
			}
		}));
	}

	/**
	 * Up to `limit` bytes (1 MiB) of a background process's output from
	 * `offset`: { data, offset, next, status }; offset is later than asked when
	 * older bytes were dropped.
	 */
	async bgRead(id, opts = {}) {
		checkKeys('bgRead', opts);
		const i = bgId(id);
		const offset = u64(opts.offset, 'offset', 0n);
		const limit = u64(opts.limit, 'limit', 0n);
		const call = callSpec('bgRead', opts);
		return this._run('bgRead', (h) => withCall(call, async (co) => {
			const out = [null];
			const len = [0];
			const st = {};
			const err = newErr();
			const rc = await callAsync(lib.bgRead, out, len, st, h, i, offset, limit, co, err);
			if (rc)
				throw errorFrom(rc, err);
			let data;
			try {
				data = copyOut(out[0], Number(len[0]));
			} finally {
				lib.free(out[0]);
			}
			const at = Number(st.offset);
			return { data, offset: at, next: at + data.length, status: bgStatusFrom(st) };
		}));
	}

	/** Send `sig` ('SIGTERM' by default, a name or a number) to its whole process group. */
	async bgSignal(id, sig = 'SIGTERM', opts = {}) {
		checkKeys('bgSignal', opts);
		const i = bgId(id);
		const num = typeof sig === 'number' ? sig : os.constants.signals[sig];
		if (!Number.isInteger(num) || num <= 0)
			throw einval(`bgSignal: ${String(sig)} is not a signal`);
		const call = callSpec('bgSignal', opts);
		return this._run('bgSignal', (h) => withCall(call, async (co) => {
			const err = newErr();
			const rc = await callAsync(lib.bgSignal, h, i, num, co, err);
			if (rc)
				throw errorFrom(rc, err);
		}));
	}

	/**
	 * Wait up to `timeout` ms (undefined: as long as it takes) for it to end:
	 * its status; rejects with ASP_ETIMEOUT when it still runs.
	 */
	async bgWait(id, opts = {}) {
		checkKeys('bgWait', opts);
		const i = bgId(id);
		const ms = opts.timeout === undefined || opts.timeout === null ? 0xffffffff : uint(opts.timeout, 'timeout');
		const call = callSpec('bgWait', { signal: opts.signal });
		return this._run('bgWait', (h) => withCall(call, async (co) => {
			const st = {};
			const err = newErr();
			const rc = await callAsync(lib.bgWait, st, h, i, ms, co, err);
			if (rc)
				throw errorFrom(rc, err);
			return bgStatusFrom(st);
		}));
	}

	/** Remove an ended background process's files (a running one: ASP_EINVAL). */
	async bgRemove(id, opts = {}) {
		checkKeys('bgRemove', opts);
		const i = bgId(id);
		const call = callSpec('bgRemove', opts);
		return this._run('bgRemove', (h) => withCall(call, async (co) => {
			const err = newErr();
			const rc = await callAsync(lib.bgRemove, h, i, co, err);
			if (rc)
				throw errorFrom(rc, err);
		}));
	}

	/** Every background process of the sandbox user, by start time. */
	async bgList(opts = {}) {
		checkKeys('bgList', opts);
		const call = callSpec('bgList', opts);
		return this._run('bgList', (h) => withCall(call, async (co) => {
			const out = [null];
			const err = newErr();
			const rc = await callAsync(lib.bgListAll, out, h, co, err);
			if (rc)
				throw errorFrom(rc, err);
			const l = out[0];
			try {
				const n = Number(lib.bgListCount(l));
				const procs = [];
				for (let k = 0; k < n; k++) {
					const e = koffi.decode(lib.bgListGet(l, k), lib.types.bgEntry);
					procs.push({ id: e.id, name: e.name, command: e.command, startMs: Number(e.start_ms),
						pid: Number(e.pid), status: bgStatusFrom(e.status) });
				}
				return procs;
			} finally {
				lib.bgListFree(l);
			}
		}));
	}

	/**
	 * Start `command` and resolve with a Process as soon as the server accepted it: write its
	 * stdin while it runs, read its output as it comes, kill, wait. Options: cwd, env,
	 * timeout (the kill timer, ms), killGrace, maxOutput, signal (an AbortSignal: kills the
	 * command), deadline (ms the start may take), pty (a terminal: term, cols, rows).
	 */
	async start(command, opts = {}) {
		checkKeys('start', opts);
		const cmd = cstr(command, 'command');
		const cwd = optCstr(opts.cwd, 'cwd');
		const env = envArray(opts.env);
		const timeout = uint(opts.timeout, 'timeout');
		const deadline = uint(opts.deadline, 'deadline');
		const killGrace = uint(opts.killGrace, 'killGrace');
		const maxOutput = uint(opts.maxOutput, 'maxOutput', Number.MAX_SAFE_INTEGER);
		const pty = !!opts.pty;
		const term = pty ? optCstr(opts.term, 'term') : null;
		const cols = pty ? uint(opts.cols, 'cols') : 0;
		const rows = pty ? uint(opts.rows, 'rows') : 0;
		const signal = opts.signal;
		if (signal !== undefined && signal !== null &&
		    (typeof signal !== 'object' || typeof signal.addEventListener !== 'function'))
			throw new TypeError('signal must be an AbortSignal');
		if (signal && signal.aborted)
			throw new AspError(ASP_ECANCELLED, 'start: cancelled before it started (the AbortSignal was already aborted)', { cause: signal.reason });
		return this._run('start', async (h) => {
			let token = null;
			let onAbort = null;
			const err = newErr();
			let ok = false;
			try {
				({ token, onAbort } = signalToken(signal));
				const o = {
					version: PROC_OPTIONS_VERSION,
					call: { version: 0, cancel: token, timeout_ms: deadline },
					cwd,
					env: env.length ? [...env, null] : null,
					kill_after_ms: timeout,
					kill_grace_ms: killGrace,
					max_output: maxOutput,
					flags: pty ? ASP_PROC_PTY : 0,
					term,
					cols,
					rows,
				};
				const out = [null];
				const rc = await callAsync(lib.procStart, out, h, cmd, o, err);
				if (rc)
					throw errorFrom(rc, err);
				const proc = new Process(this, out[0], token, onAbort, signal, pty);
				this._procs.add(proc);
				ok = true;
				return proc;
			} finally {
				if (!ok && onAbort)
					signal.removeEventListener('abort', onAbort);
				if (!ok && token)
					lib.cancelFree(token);
			}
		});
	}

	/** Metadata of a path (symlinks followed). */
	async stat(file, opts = {}) {
		checkKeys('stat', opts);
		const p = cstr(file, 'path');
		const call = callSpec('stat', opts);
		return this._run('stat', (h) => withCall(call, async (co) => {
			const st = {};
			const err = newErr();
			const rc = await callAsync(lib.stat, st, h, p, co, err);
			if (rc)
				throw errorFrom(rc, err);
			return statFrom(st);
		}));
	}

	/** Create a directory; with `parents`, missing parents too and no error if it exists. */
	async mkdir(dir, opts = {}) {
		checkKeys('mkdir', opts);
		const p = cstr(dir, 'path');
		const mode = uint(opts.mode, 'mode', 0o7777);
		const flags = opts.parents ? ASP_MKDIR_PARENTS : 0;
		const call = callSpec('mkdir', opts);
		return this._run('mkdir', (h) => withCall(call, async (co) => {
			const err = newErr();
			const rc = await callAsync(lib.mkdir, h, p, mode, flags, co, err);
			if (rc)
				throw errorFrom(rc, err);
		}));
	}

	/** Entries of a directory (without . and ..), sorted by name; symlinks not followed. */
	async list(dir, opts = {}) {
		checkKeys('list', opts);
		const p = cstr(dir, 'path');
		const call = callSpec('list', opts);
		return this._run('list', (h) => withCall(call, async (co) => {
			const out = [null];
			const err = newErr();
			const rc = await callAsync(lib.listDir, out, h, p, co, err);
			if (rc)
				throw errorFrom(rc, err);
			const l = out[0];
			try {
				const n = Number(lib.listCount(l));
				const entries = [];
				for (let i = 0; i < n; i++) {
					const st = {};
					lib.listStat(st, l, i);
					entries.push({ name: lib.listName(l, i), ...statFrom(st) });
				}
				return entries;
			} finally {
				lib.listFree(l);
			}
		}));
	}

	/** Remove a file or an empty directory; with `recursive`, a whole tree. */
	async remove(file, opts = {}) {
		checkKeys('remove', opts);
		const p = cstr(file, 'path');
		const flags = opts.recursive ? ASP_REMOVE_RECURSIVE : 0;
		const call = callSpec('remove', opts);
		return this._run('remove', (h) => withCall(call, async (co) => {
			const err = newErr();
			const rc = await callAsync(lib.remove, h, p, flags, co, err);
			if (rc)
				throw errorFrom(rc, err);
		}));
	}

	/** Rename `from` to `to`, replacing a file at `to`. */
	async rename(from, to, opts = {}) {
		checkKeys('rename', opts);
		const a = cstr(from, 'from');
		const b = cstr(to, 'to');
		const call = callSpec('rename', opts);
		return this._run('rename', (h) => withCall(call, async (co) => {
			const err = newErr();
			const rc = await callAsync(lib.rename, h, a, b, co, err);
			if (rc)
				throw errorFrom(rc, err);
		}));
	}

	/**
	 * Connect until the pool holds `connections` (at most maxConnections), one
	 * after another, so that that many concurrent calls start without a
	 * handshake. Connections already open count; 0 does nothing.
	 */
	async warm(connections, opts = {}) {
		checkKeys('warm', opts);
		if (connections === undefined || connections === null)
			throw new TypeError('warm: connections is required');
		const n = uint(connections, 'connections');
		const call = callSpec('warm', opts);
		return this._run('warm', (h) => withCall(call, async (co) => {
			const err = newErr();
			const rc = await callAsync(lib.warm, h, n, co, err);
			if (rc)
				throw errorFrom(rc, err);
		}));
	}

	/**
	 * Describe the connection (trust, auth, host key). May connect, when no
	 * connection is open, and so fail as open() can.
	 */
	async info() {
		return this._run('info', async (h) => {
			const info = {
				version: SANDBOX_INFO_VERSION, trust: 0, auth: 0,
				host_key_type: '', host_key_fingerprint: '', known_hosts: '',
				kex: '', cipher: '', mac: '', server_banner: '', file_transport: 0,
			};
			const err = newErr();
			const rc = await callAsync(lib.infoGet, info, h, err);
			if (rc)
				throw errorFrom(rc, err);
			return {
				trust: TRUST_NAMES[info.trust] || String(info.trust),
				auth: AUTH_NAMES[info.auth] || String(info.auth),
				hostKeyType: info.host_key_type,
				hostKeyFingerprint: info.host_key_fingerprint,
				knownHosts: info.known_hosts,
				kex: info.kex,
				cipher: info.cipher,
				mac: info.mac,
				serverBanner: info.server_banner,
				/* null (not decided yet) is a value here: ?? would turn it into '0'. */
				fileTransport: info.file_transport in FILES_NAMES ? FILES_NAMES[info.file_transport]
									   : String(info.file_transport),
			};
		});
	}

	/**
	 * Wait for the operations in flight, then close every connection.
	 * New operations are refused from the moment close() is called.
	 */
	close() {
		if (this._h === CLOSED)
			return Promise.resolve();
		if (this._closing)
			return this._closing;
		const h = this._h;
		this._closing = (async () => {
			await Promise.allSettled([...this._inflight]);
			/* A Process's command is killed before the handle goes. */
			await Promise.allSettled([...this._procs].map((p) => p.close()));
			await new Promise((resolve, reject) =>
				startAsync(lib.close, [h], (e) => (e ? reject(e) : resolve())));
			this._h = CLOSED;
		})();
		return this._closing;
	}
}

/* ------------------------------------------------------------ module API */

/*
 * Opens (a TCP connect and an SSH handshake: from milliseconds to seconds
 * when a server is busy) take at most half of libuv's pool at once; the rest
 * wait here, in order, holding no thread. libuv serves its queue in order,
 * so 500 opens queued at once made every later call wait behind all of them:
 * an exec on a sandbox already open waited for the 500th handshake to start.
 */
const openQueue = [];
let opensRunning = 0;

function opensAtOnce() {
	const size = Number(process.env.UV_THREADPOOL_SIZE) || THREADPOOL_SIZE;
	return Math.max(1, Math.floor(size / 2));
}

async function openTurn() {
	if (opensRunning < opensAtOnce()) {
		opensRunning++;
		return;
	}
	await new Promise((resolve) => openQueue.push(resolve));
}

function openDone() {
	const next = openQueue.shift();
	if (next)
		next();
	else
		opensRunning--;
}

sizeThreadPool();

function fileTransport(v) {
	if (v === undefined || v === null)
		return 0;
	if (!Object.prototype.hasOwnProperty.call(FILES_BY_NAME, v))
		throw new TypeError(`fileTransport must be 'auto', 'sftp' or 'exec', not ${JSON.stringify(v)}`);
	return FILES_BY_NAME[v];
}

/** Open a sandbox: find and validate .asp.json, and connect (unless `lazy`). */
async function open(opts = {}) {
	checkKeys('open', opts);
	load();
	const o = {
		version: OPEN_OPTIONS_VERSION,
		config_path: optCstr(opts.config, 'config'),
		start_dir: optCstr(opts.startDir, 'startDir'),
		known_hosts: optCstr(opts.knownHosts, 'knownHosts'),
		max_connections: uint(opts.maxConnections, 'maxConnections'),
		connect_timeout_ms: uint(opts.connectTimeout, 'connectTimeout'),
		io_timeout_ms: uint(opts.ioTimeout, 'ioTimeout'),
		keepalive_s: uint(opts.keepalive, 'keepalive'),
		idle_close_s: uint(opts.idleClose, 'idleClose'),
		flags: opts.lazy ? ASP_OPEN_LAZY : 0,
		op_timeout_ms: uint(opts.opTimeout, 'opTimeout'),
		max_read_bytes: u64(opts.maxReadBytes, 'maxReadBytes', 0n),
		max_output: uint(opts.maxOutput, 'maxOutput', Number.MAX_SAFE_INTEGER),
		max_list_entries: uint(opts.maxListEntries, 'maxListEntries'),
		file_transport: fileTransport(opts.fileTransport),
		config_text: optCstr(opts.configText, 'configText'),
		max_list_bytes: u64(opts.maxListBytes, 'maxListBytes', 0n),
	};
	const out = [null];
	const err = newErr();
	await openTurn();
	let rc;
	try {
		rc = await callAsync(lib.open, out, o, err);
	} finally {
		openDone();
	}
	if (rc)
		throw errorFrom(rc, err);
	return new Sandbox(out[0], o.max_connections);
}

/** Discovery only: $ASP_CONFIG, else .asp.json in startDir and its parents. */
async function findConfig(startDir) {
	load();
	const dir = optCstr(startDir, 'startDir');
	const out = [null];
	const err = newErr();
	const rc = await callAsync(lib.findConfig, out, dir, err);
	if (rc)
		throw errorFrom(rc, err);
	try {
		return koffi.decode(out[0], 'char', -1);
	} finally {
		lib.free(out[0]);
	}
}

/**
 * Discovery returning what the file holds: { path, text }. The text is read
 * from the very descriptor discovery opened and judged, so it is the file
 * the trust rules accepted even if the directories around it are renamed
 * meanwhile; open({ config: path, configText: text }) opens what was judged
 * (opening findConfig's path again is a second lookup).
 */
async function readConfig(startDir) {
	load();
	const dir = optCstr(startDir, 'startDir');
	const text = [null];
	const path = [null];
	const err = newErr();
	const rc = await callAsync(lib.readConfig, text, path, dir, err);
	if (rc)
		throw errorFrom(rc, err);
	try {
		return { path: koffi.decode(path[0], 'char', -1), text: koffi.decode(text[0], 'char', -1) };
	} finally {
		lib.free(text[0]);
		lib.free(path[0]);
	}
}

/** Load and validate a configuration file without connecting. */
async function checkConfig(file) {
	load();
	const p = cstr(file, 'path');
	const err = newErr();
	const rc = await callAsync(lib.checkConfig, p, err);
	if (rc)
		throw errorFrom(rc, err);
}

module.exports = {
	open,
	findConfig,
	readConfig,
	checkConfig,
	AspError,
	Sandbox,
	Process,
	READ_ALL,
	/** The running library's version string, e.g. "0.1.0". */
	version() {
		load();
		return lib.version();
	},
	/** Path or name the shared library was loaded from. */
	get libraryPath() {
		return load();
	},
	/** Every error code by name, from asp_error_name: { ASP_OK: 0, ASP_ERROR: -1, ... }. */
	get codes() {
		load();
		return codes;
	},
	load,
};

/* [C name, value, where] for each entry of a value -> name map, named through cNames (name -> C name). */
function enumEntries(where, byValue, cNames) {
	return Object.entries(byValue).filter(([, name]) => name !== null)
		.map(([value, name]) => [cNames[name] || `(no C name for ${name})`, Number(value), where]);
}

/*
 * For the binding's own tests (test/layout.test.js): the koffi types that
 * mirror asp.h's structs and the constants copied from it. A symbol key, so
 * it is no part of the API (Object.keys, the ES module and index.d.ts do not
 * see it).
 */
Object.defineProperty(module.exports, Symbol.for('libasp.internals'), {
	value: () => {
		load();
		const t = lib.types;
		return {
			structs: {
				asp_open_options: t.openOptions, asp_call_options: t.callOptions,
				asp_write_options: t.writeOptions, asp_exec_options: t.execOptions,
				asp_stat_info: t.statInfo, asp_sandbox_info: t.sandboxInfo,
				asp_bg_options: t.bgOptions, asp_bg_status: t.bgStatus, asp_bg_entry: t.bgEntry,
				asp_stat_info: t.statInfo, asp_sandbox_info: t.sandboxInfo, asp_proc_options: t.procOptions,
			},
			/* asp_error is a Buffer decoded by hand: int code, then char message[]. */
			errorSize: newErr().length,
			bufferAddress,
			errorMessageOffset: 4,
			constants: {
				ASP_OPEN_LAZY, ASP_MKDIR_PARENTS, ASP_WRITE_PARENTS, ASP_WRITE_IN_PLACE, ASP_REMOVE_RECURSIVE, ASP_STDOUT, ASP_STDERR,
				ASP_OPEN_OPTIONS_VERSION: OPEN_OPTIONS_VERSION, ASP_WRITE_OPTIONS_VERSION: WRITE_OPTIONS_VERSION,
				ASP_CALL_OPTIONS_VERSION: CALL_OPTIONS_VERSION, ASP_EXEC_OPTIONS_VERSION: EXEC_OPTIONS_VERSION,
				ASP_SANDBOX_INFO_VERSION: SANDBOX_INFO_VERSION, ASP_ERROR_MESSAGE_MAX: ERROR_MESSAGE_MAX,
				ASP_EINVAL, ASP_ECANCELLED, ASP_ETIMEOUT, ASP_PROC_PTY, ASP_PROC_OPTIONS_VERSION: PROC_OPTIONS_VERSION,
			},
			readAll: READ_ALL,
			/* [C enum name, the value the binding maps to or from, which map]. */
			enums: [
				...Object.entries(FILES_BY_NAME).map(([name, v]) => [`ASP_FILES_${name.toUpperCase()}`, v, 'FILES_BY_NAME']),
				...enumEntries('FILES_NAMES', FILES_NAMES, { sftp: 'ASP_FILES_SFTP', exec: 'ASP_FILES_EXEC' }),
				...enumEntries('TRUST_NAMES', TRUST_NAMES, { pinned: 'ASP_TRUST_PINNED', known: 'ASP_TRUST_KNOWN', 'first-use': 'ASP_TRUST_FIRST_USE' }),
				...enumEntries('AUTH_NAMES', AUTH_NAMES, { none: 'ASP_AUTH_NONE', publickey: 'ASP_AUTH_PUBLICKEY', agent: 'ASP_AUTH_AGENT' }),
				...enumEntries('TYPE_NAMES', TYPE_NAMES, { file: 'ASP_TYPE_FILE', directory: 'ASP_TYPE_DIR', symlink: 'ASP_TYPE_SYMLINK', other: 'ASP_TYPE_OTHER' }),
			],
		};
	},
});
