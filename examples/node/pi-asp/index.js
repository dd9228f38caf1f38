/*
 * pi-asp: run the pi coding agent's tools in an ASP sandbox.
 *
 * When a .asp.json is found ($ASP_CONFIG, else the working directory and its
 * parents), every pi tool (read, write, edit, bash, grep, find, ls, and `!`
 * user commands) keeps its schema, truncation and rendering, but acts in the
 * sandbox through libasp: files over SFTP, commands in a fresh remote shell
 * with streaming output, timeouts and cancellation that kill the whole remote
 * process group.
 *
 *   pi -e ./examples/node/pi-asp          (or list it in settings.json)
 *
 * The model is not told about the transport: it sees the sandbox workspace as
 * its working directory, and errors as a local tool would show them (Node fs
 * errors naming sandbox paths, or "the environment is unavailable"). What
 * libasp said in full goes to the user (pi's notifications, else stderr).
 *
 * Without a .asp.json the extension does nothing and pi stays local (it says
 * so once on stderr). With one that cannot be used (including an $ASP_CONFIG
 * that names no file, or is set but empty), the tools fail: they never fall
 * back to the local machine.
 */

import { AsyncLocalStorage } from 'node:async_hooks';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import {
	createBashToolDefinition,
	createEditToolDefinition,
	createFindToolDefinition,
	createGrepToolDefinition,
	createLsToolDefinition,
	createReadToolDefinition,
	createWriteToolDefinition,
	DEFAULT_MAX_BYTES,
	DEFAULT_MAX_LINES,
	formatSize,
	formatSkillsForPrompt,
	truncateHead,
	truncateTail,
	truncateLine,
} from '@mariozechner/pi-coding-agent';
import { fileTypeFromBuffer } from 'file-type';
import asp from 'libasp';

/* What pi's read tool accepts as images (pi: dist/utils/mime.js). */
const IMAGE_MIME_TYPES = new Set(['image/jpeg', 'image/png', 'image/gif', 'image/webp']);
const FILE_TYPE_SNIFF_BYTES = 4100;

/* The tools this extension puts in the sandbox: all of pi's built-in ones. */
export const TOOL_NAMES = ['read', 'write', 'edit', 'bash', 'grep', 'find', 'ls'];

/* What the model is told when the sandbox cannot be reached or used. */
export const UNAVAILABLE = 'the environment is unavailable';

/* pi's grep/find/ls defaults (pi: dist/core/tools/{grep,find,ls}.js). */
const GREP_DEFAULT_LIMIT = 100;
const GREP_MAX_LINE_LENGTH = 500;
const FIND_DEFAULT_LIMIT = 1000;
/* Stand-in for .gitignore where the sandbox has no ripgrep (pi's find ignores these too). */
const PRUNED_DIRS = ['.git', 'node_modules'];

/*
 * pi's tools show Node's fs errors to the model ("ENOENT: no such file or
 * directory, open '/x'", and the edit tool prints `error.code`), so libasp
 * errors about files are given the same shape; the AspError is the cause.
 */
const NODE_ERRORS = {
	ASP_ENOENT: ['ENOENT', 'no such file or directory'],
	ASP_EACCES: ['EACCES', 'permission denied'],
	ASP_EISDIR: ['EISDIR', 'illegal operation on a directory'],
	ASP_ENOTDIR: ['ENOTDIR', 'not a directory'],
	ASP_EEXIST: ['EEXIST', 'file already exists'],
	ASP_ENOTEMPTY: ['ENOTEMPTY', 'directory not empty'],
	ASP_ENOSPC: ['ENOSPC', 'no space left on device'],
	ASP_EROFS: ['EROFS', 'read-only file system'],
	ASP_EBUSY: ['EBUSY', 'resource busy or locked'],
	ASP_EIO: ['EIO', 'i/o error'],
	ASP_ETIMEOUT: ['ETIMEDOUT', 'operation timed out'],
	ASP_ELIMIT: ['EFBIG', 'file too large'],
	ASP_EINVAL: ['EINVAL', 'invalid argument'],
};

/* Errors built here for the model; anything else is replaced before the model sees it. */
const forModel = new WeakSet();
function modelSafe(err) {
	forModel.add(err);
	return err;
}

/* Each tool call's AbortSignal and pi context, for the operations pi calls without them. */
const callContext = new AsyncLocalStorage();

function nodeError(code, text, syscall, file, cause) {
	const err = new Error('', { cause });
	err.code = code;
	err.errno = -(os.constants.errno[code] ?? 0);
	err.syscall = syscall;
	if (syscall === 'read') {
		err.message = `${code}: ${text}, read`;
	} else {
		err.path = file;
		err.message = `${code}: ${text}, ${syscall} '${file}'`;
	}
	return modelSafe(err);
}

export function toNodeError(e, syscall, file) {
	if (!(e instanceof asp.AspError) || !NODE_ERRORS[e.code])
		return e;
	const [code, text] = NODE_ERRORS[e.code];
	/* fs.readFile opens a directory fine and fails in read(2), naming no path. */
	if (syscall === 'readFile')
		syscall = code === 'EISDIR' ? 'read' : 'open';
	return nodeError(code, text, syscall, file, e);
}

/* "Operation aborted" is what pi's own tools say (bash says "aborted", see below). */
function abortedError(cause) {
	return modelSafe(new Error('Operation aborted', { cause }));
}

/*
 * The sandbox cannot be reached or used (connection refused or lost, host
 * key, authentication, configuration, protocol, or anything unexpected).
 * The model gets errno-like text naming only the sandbox path; the full
 * libasp message is reported to the user.
 */
function unavailableError(e, syscall, file) {
	report(e);
	const where = file === undefined ? '' : `, ${syscall} '${file}'`;
	const err = new Error(`EIO: ${UNAVAILABLE}${where}`, { cause: e });
	err.code = 'EIO';
	return modelSafe(err);
}

/* Any error of a sandbox call, as the model may see it. */
export function modelError(e, syscall, file) {
	if (forModel.has(e))
		return e;
	if (e instanceof asp.AspError && e.code === 'ASP_ECANCELLED')
		return abortedError(e);
	if (e instanceof asp.AspError && NODE_ERRORS[e.code]) {
		if (e.code === 'ASP_ETIMEOUT' || e.code === 'ASP_EIO')
			report(e);
		return file === undefined ? unavailableError(e) : toNodeError(e, syscall, file);
	}
	return unavailableError(e, syscall, file);
}

/* The reporter of the extension instance whose tool is running (see createPiAspExtension). */
let defaultReporter = (message) => process.stderr.write(`pi-asp: ${message}\n`);
function report(e) {
	const store = callContext.getStore();
	const message = e instanceof Error ? e.message : String(e);
	(store?.report ?? defaultReporter)(message, store?.ctx);
}

/* signal, and the shutdown signal `stop()` (createPiAspExtension aborts it when pi ends). */
function withStop(signal, stop) {
	const s = stop?.();
	if (!s)
		return signal;
	return signal ? AbortSignal.any([signal, s]) : s;
}

/* Resolve when `p` settles, or reject as soon as `signal` aborts (for a binding that ignores it). */
function raceAbort(p, signal) {
	if (!signal)
		return p;
	if (signal.aborted)
		return Promise.reject(abortedError(signal.reason));
	return new Promise((resolve, reject) => {
		const onAbort = () => reject(abortedError(signal.reason));
		signal.addEventListener('abort', onAbort, { once: true });
		p.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
	});
}

/*
 * A file call: the tool call's AbortSignal goes to the binding as
 * `{ signal }` in the last (options) argument; a binding that ignores it
 * still lets the tool return at once.
 */
async function fsCall(syscall, file, fn) {
	const signal = callContext.getStore()?.signal;
	try {
		return await raceAbort(fn(signal ? { signal } : {}), signal);
	} catch (e) {
		throw modelError(e, syscall, file);
	}
}

/* One shell word, for the sandbox's POSIX sh. */
export function shq(s) {
	s = String(s);
	if (s.includes('\0'))
		throw modelSafe(new Error('EINVAL: invalid argument: an argument contains a NUL byte'));
	return `'${s.replace(/'/g, "'\\''")}'`;
}

/*
 * A command in the sandbox for grep/find: the tool call's signal, or `stop`
 * (a result limit was reached), kill its remote process group.
 */
async function sandboxRun(sb, command, { cwd, stdin, onData, signal, stop } = {}) {
	const signals = [signal, stop].filter(Boolean);
	let r;
	try {
		r = await (await sb()).exec(command, {
			cwd,
			stdin,
			onData,
			maxOutput: onData ? 1 : 0,
			signal: signals.length > 1 ? AbortSignal.any(signals) : signals[0],
		});
	} catch (e) {
		if (e instanceof asp.AspError && e.code === 'ASP_ECANCELLED' && !signal?.aborted && stop?.aborted)
			return { cancelled: true, exitCode: null, stdout: Buffer.alloc(0), stderr: Buffer.alloc(0) };
		/* A working directory that is not there (or not a directory) is the caller's path. */
		if (cwd !== undefined && e instanceof asp.AspError && (e.code === 'ASP_ENOENT' || e.code === 'ASP_ENOTDIR' || e.code === 'ASP_EACCES'))
			throw toNodeError(e, 'scandir', cwd);
		throw modelError(e);
	}
	if (signal?.aborted)
		throw abortedError();
	return r;
}

function resolveIn(cwd, p) {
	p = p.startsWith('@') ? p.slice(1) : p;
	return path.posix.resolve(cwd, p);
}

/**
 * pi operations objects backed by a libasp Sandbox:
 * { read: ReadOperations, write: WriteOperations, edit: EditOperations,
 *   bash: BashOperations, find: FindOperations, ls: LsOperations }.
 *
 * options.env: names of local environment variables to pass to remote
 * commands. By default none is: pi hands its bash operations the whole local
 * environment (API keys included), and that must not reach the sandbox.
 */
export function createAspOperations(sandbox, options = {}) {
	const sb = typeof sandbox === 'function' ? sandbox : () => sandbox;
	const forward = options.env || [];

	const readFile = (file) => fsCall('readFile', file, async (o) => (await sb()).read(file, o));
	/* fs.access(R_OK): an open for reading, without reading (a directory passes, as locally). */
	const canRead = (file) => fsCall('access', file, async (o) => {
		await (await sb()).read(file, { limit: 0, ...o });
	});
	/* fs.access(W_OK): only the sandbox's own test(1) knows its users and ACLs. */
	const canWrite = async (file) => {
		let r;
		try {
			r = await (await sb()).exec(`test -w ${shq(file)}`, { signal: callContext.getStore()?.signal });
		} catch (e) {
			throw modelError(e, 'access', file);
		}
		if (r.cancelled)
			throw abortedError();
		if (r.exitCode !== 0)
			throw nodeError('EACCES', 'permission denied', 'access', file);
	};
	const writeFile = (file, content) => fsCall('open', file, async (o) => (await sb()).write(file, content, o));
	const mkdir = (dir) => fsCall('mkdir', dir, async (o) => (await sb()).mkdir(dir, { parents: true, ...o }));
	const stat = (file) => fsCall('stat', file, async (o) => (await sb()).stat(file, o));
	/* fs.existsSync: false only when there is nothing there; an unreachable sandbox is an error. */
	const exists = async (file) => {
		try {
			await stat(file);
			return true;
		} catch (e) {
			if (e.code === 'ENOENT' || e.code === 'ENOTDIR')
				return false;
			throw e;
		}
	};

	const read = {
		readFile,
		access: canRead,
		async detectImageMimeType(file) {
			const head = await fsCall('readFile', file, async (o) =>
				(await sb()).read(file, { limit: FILE_TYPE_SNIFF_BYTES, ...o }));
			if (!head.length)
				return null;
			const type = await fileTypeFromBuffer(head);
			return type && IMAGE_MIME_TYPES.has(type.mime) ? type.mime : null;
		},
	};

	const bash = {
		/* The contract of pi's BashOperations.exec (pi: dist/core/tools/bash.js, createLocalBashOperations). */
		async exec(command, cwd, { onData, signal, timeout }) {
			signal = withStop(signal, options.stop);
			const env = {};
			for (const name of forward)
				if (process.env[name] !== undefined)
					env[name] = process.env[name];
			/*
			 * A running command with a handle: its output goes to pi as it comes, the
			 * abort and the timeout kill its remote process group (the handle's cancel
			 * token and kill timer), and its stdin is closed at once, as pi's local
			 * executor gives a command no input.
			 */
			let r, proc = null;
			try {
				proc = await (await sb()).start(command, {
					cwd,
					env,
					signal,
					timeout: timeout !== undefined && timeout > 0 ? timeout * 1000 : 0,
					/* pi accumulates the output from onData; libasp need not keep a copy. */
					maxOutput: 1,
				});
				await proc.closeStdin();
				for await (const { data } of proc)
					onData(data);
				r = await proc.wait();
			} catch (e) {
				if (e instanceof asp.AspError && e.code === 'ASP_ECANCELLED')
					throw modelSafe(new Error('aborted', { cause: e }));
				if (e instanceof asp.AspError && e.code === 'ASP_ENOENT')
					throw modelSafe(new Error(`Working directory does not exist: ${cwd}\nCannot execute bash commands.`, { cause: e }));
				throw modelError(e);
			} finally {
				await proc?.close();
			}
			if (r.cancelled || signal?.aborted)
				throw modelSafe(new Error('aborted'));
			if (r.timedOut)
				throw modelSafe(new Error(`timeout:${timeout}`));
			return { exitCode: r.exitCode };
		},
	};

	/* Types from the last listing, so ls need not stat every entry again (symlinks are). */
	const listed = new Map();
	const ls = {
		exists,
		async stat(file) {
			const type = listed.get(file);
			listed.delete(file);
			if (type === 'directory' || type === 'file' || type === 'other')
				return { isDirectory: () => type === 'directory' };
			const st = await stat(file);
			return { isDirectory: () => st.type === 'directory' };
		},
		async readdir(dir) {
			const entries = await fsCall('scandir', dir, async (o) => (await sb()).list(dir, o));
			for (const e of entries)
				listed.set(path.posix.join(dir, e.name), e.type);
			return entries.map((e) => e.name);
		},
	};

	const find = {
		exists,
		/* Files and directories under cwd matching pattern as pi's fd call does (see findPathMatcher). */
		async glob(pattern, cwd, { limit }) {
			const signal = callContext.getStore()?.signal;
			const matches = findPathMatcher(pattern);
			const out = [];
			const stop = new AbortController();
			await listTree(sb, cwd, { signal, stop: stop.signal, files: false }, (rel) => {
				if (out.length >= limit)
					return;
				const abs = path.posix.join(cwd, rel);
				if (matches(abs))
					out.push(abs);
				if (out.length >= limit)
					stop.abort();
			});
			return out.sort();
		},
	};

	return {
		read,
		write: { writeFile, mkdir },
		edit: {
			readFile,
			writeFile,
			async access(file) {
				await canRead(file);
				await canWrite(file);
			},
		},
		bash,
		ls,
		find,
	};
}

/*
 * Every path under dir (relative, without "./"), NUL-separated from a POSIX
 * find in the sandbox, with .git and node_modules pruned; `each` sees them
 * as they arrive.
 */
async function listTree(sb, dir, { signal, stop, files }, each) {
	const prune = PRUNED_DIRS.map((d) => `-name ${shq(d)}`).join(' -o ');
	const cmd = `find . \\( ${prune} \\) -prune -o ${files ? '-type f ' : ''}-print0`;
	let rest = Buffer.alloc(0);
	const r = await sandboxRun(sb, cmd, {
		cwd: dir, signal, stop,
		onData: (stream, chunk) => {
			if (stream !== 'stdout' || stop?.aborted)
				return;
			rest = Buffer.concat([rest, chunk]);
			let nul;
			while ((nul = rest.indexOf(0)) >= 0 && !stop?.aborted) {
				const name = rest.subarray(0, nul).toString();
				rest = rest.subarray(nul + 1);
				if (name !== '.')
					each(name.replace(/^\.\//, ''));
			}
		},
	});
	return r;
}

/*
 * A glob as a RegExp: `**` any number of path segments, `*` and `?` within
 * one, `[...]` classes, `{a,b}` alternatives.
 */
export function globToRegExp(glob) {
	let re = '';
	let depth = 0;
	for (let i = 0; i < glob.length; i++) {
		const c = glob[i];
		if (c === '*') {
			if (glob[i + 1] === '*') {
				const slash = glob[i + 2] === '/';
				re += slash ? '(?:.*/)?' : '.*';
				i += slash ? 2 : 1;
			} else {
				re += '[^/]*';
			}
		} else if (c === '?') {
			re += '[^/]';
		} else if (c === '[') {
			const close = glob.indexOf(']', i + 2);
			if (close < 0) {
				re += '\\[';
			} else {
				let body = glob.slice(i + 1, close);
				if (body[0] === '!')
					body = `^${body.slice(1)}`;
				re += `[${body.replace(/\\/g, '\\\\')}]`;
				i = close;
			}
		} else if (c === '{') {
			depth++;
			re += '(?:';
		} else if (c === '}' && depth > 0) {
			depth--;
			re += ')';
		} else if (c === ',' && depth > 0) {
			re += '|';
		} else if (c === '\\' && i + 1 < glob.length) {
			re += glob[++i].replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
		} else {
			re += c.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
		}
	}
	re += ')'.repeat(depth);
	return new RegExp(`^${re}$`);
}

/*
 * pi's find (fd --glob): a pattern without '/' matches the file name; one
 * with '/' matches the whole path, with a leading `**` added unless it is
 * absolute or starts with `**`.
 */
function findPathMatcher(pattern) {
	if (!pattern.includes('/')) {
		const re = globToRegExp(pattern);
		return (abs) => re.test(path.posix.basename(abs));
	}
	const full = pattern.startsWith('/') || pattern.startsWith('**/') || pattern === '**' ? pattern : `**/${pattern}`;
	const re = globToRegExp(full.startsWith('/') ? full : `/${full}`);
	return (abs) => re.test(abs);
}

/* ripgrep's --glob (gitignore style): without '/' the file name, else the path below the search root. */
function grepGlobMatcher(glob) {
	if (!glob)
		return () => true;
	if (!glob.replace(/\/$/, '').includes('/')) {
		const re = globToRegExp(glob);
		return (rel) => re.test(path.posix.basename(rel));
	}
	const re = globToRegExp(glob.replace(/^\//, ''));
	return (rel) => re.test(rel);
}

/*
 * A ripgrep (Rust) regex for POSIX grep -E: the shorthand classes become
 * bracket expressions; the rest of ERE is common ground.
 */
export function toEre(pattern) {
	const outside = { d: '[0-9]', D: '[^0-9]', w: '[[:alnum:]_]', W: '[^[:alnum:]_]', s: '[[:space:]]', S: '[^[:space:]]' };
	const inside = { d: '0-9', w: '[:alnum:]_', s: '[:space:]' };
	let out = '';
	let inClass = false;
	for (let i = 0; i < pattern.length; i++) {
		const c = pattern[i];
		if (c === '\\' && i + 1 < pattern.length) {
			const n = pattern[++i];
			if (!inClass && outside[n])
				out += outside[n];
			else if (inClass && inside[n])
				out += inside[n];
			else if (n === 't')
				out += '\t';
			else
				out += `\\${n}`;
			continue;
		}
		if (!inClass && c === '[') {
			inClass = true;
			out += c;
			if (pattern[i + 1] === '^')
				out += pattern[++i];
			if (pattern[i + 1] === ']')
				out += pattern[++i];
			continue;
		}
		if (inClass && c === '[' && pattern[i + 1] === ':') {
			const end = pattern.indexOf(':]', i + 2);
			if (end > 0) {
				out += pattern.slice(i, end + 2);
				i = end + 1;
				continue;
			}
		}
		if (inClass && c === ']')
			inClass = false;
		out += c;
	}
	return out;
}

/* Which search tool the sandbox has: 'rg' when ripgrep is on its PATH, else 'grep'. */
async function grepBackend(sb, choice, cache) {
	if (choice === 'rg' || choice === 'grep')
		return choice;
	if (!cache.backend) {
		cache.backend = sandboxRun(sb, 'command -v rg >/dev/null 2>&1')
			.then((r) => (r.exitCode === 0 ? 'rg' : 'grep'), (e) => {
				cache.backend = null;
				throw e;
			});
	}
	return cache.backend;
}

/* rg --json in the sandbox, with pi's arguments (pi: dist/core/tools/grep.js). */
async function grepWithRg(sb, p, searchPath, limit, signal) {
	const args = ['--json', '--line-number', '--color=never', '--hidden'];
	if (p.ignoreCase)
		args.push('--ignore-case');
	if (p.literal)
		args.push('--fixed-strings');
	if (p.glob)
		args.push('--glob', p.glob);
	args.push('--', p.pattern, searchPath);
	const matches = [];
	const stop = new AbortController();
	let line = '';
	const stderr = [];
	const r = await sandboxRun(sb, `rg ${args.map(shq).join(' ')}`, {
		signal, stop: stop.signal,
		onData: (stream, chunk) => {
			if (stream === 'stderr') {
				stderr.push(chunk);
				return;
			}
			const lines = (line + chunk.toString()).split('\n');
			line = lines.pop();
			for (const l of lines) {
				if (matches.length >= limit)
					return;
				let event;
				try {
					event = JSON.parse(l);
				} catch {
					continue;
				}
				if (event.type !== 'match')
					continue;
				const filePath = event.data?.path?.text;
				const lineNumber = event.data?.line_number;
				if (filePath && typeof lineNumber === 'number')
					matches.push({ filePath, lineNumber, lineText: event.data?.lines?.text });
				if (matches.length >= limit)
					stop.abort();
			}
		},
	});
	if (!stop.signal.aborted && r.exitCode !== 0 && r.exitCode !== 1)
		throw modelSafe(new Error(Buffer.concat(stderr).toString().trim() || `ripgrep exited with code ${r.exitCode}`));
	return { matches, limitReached: stop.signal.aborted };
}

/*
 * POSIX find + grep in the sandbox: the file list (find -print0, .git and
 * node_modules pruned, --glob applied here), then `grep -n` over it through
 * xargs -0. Output lines are "NAME:LINE:TEXT"; since NAME may hold ':' or a
 * newline, each is matched against the names given, in order.
 */
async function grepWithPosix(sb, p, searchPath, isDirectory, limit, signal) {
	let dir = searchPath;
	let names;
	if (isDirectory) {
		const want = grepGlobMatcher(p.glob);
		names = [];
		await listTree(sb, dir, { signal, files: true }, (rel) => {
			if (want(rel))
				names.push(`./${rel}`);
		});
	} else {
		dir = path.posix.dirname(searchPath);
		names = [`./${path.posix.basename(searchPath)}`];
	}
	const matches = [];
	if (!names.length)
		return { matches, limitReached: false };
	const flags = ['-n', p.literal ? '-F' : '-E'];
	if (p.ignoreCase)
		flags.push('-i');
	const pattern = p.literal ? p.pattern : toEre(p.pattern);
	/* /dev/null first: grep names the file even when xargs passes it one. */
	const cmd = `xargs -0 grep ${flags.join(' ')} -e ${shq(pattern)} -- /dev/null`;
	const stop = new AbortController();
	let buf = '';
	let next = 0;
	const stderr = [];
	const parse = () => {
		let pos = 0;
		for (;;) {
			if (matches.length >= limit)
				break;
			let took = false;
			let need = false;
			for (let k = next; k < names.length; k++) {
				const n = names[k];
				if (!buf.startsWith(`${n}:`, pos))
					continue;
				const m = /^(\d+):/.exec(buf.slice(pos + n.length + 1, pos + n.length + 24));
				if (!m)
					continue;
				const start = pos + n.length + 1 + m[0].length;
				const nl = buf.indexOf('\n', start);
				if (nl < 0) {
					need = true;
					break;
				}
				matches.push({ filePath: path.posix.join(dir, n), lineNumber: Number(m[1]), lineText: buf.slice(start, nl) });
				next = k;
				pos = nl + 1;
				took = true;
				break;
			}
			if (need)
				break;
			if (!took) {
				/* not a match line ("binary file matches", ...) */
				const nl = buf.indexOf('\n', pos);
				if (nl < 0)
					break;
				pos = nl + 1;
			}
		}
		buf = buf.slice(pos);
		if (matches.length >= limit)
			stop.abort();
	};
	await sandboxRun(sb, cmd, {
		cwd: dir, signal, stop: stop.signal,
		stdin: Buffer.from(`${names.join('\0')}\0`),
		onData: (stream, chunk) => {
			if (stream === 'stderr') {
				stderr.push(chunk);
				return;
			}
			if (stop.signal.aborted)
				return;
			buf += chunk.toString();
			parse();
		},
	});
	const err = Buffer.concat(stderr).toString().trim();
	if (!matches.length && err)
		throw modelSafe(new Error(err));
	return { matches, limitReached: stop.signal.aborted };
}

/*
 * pi's grep tool with its schema, description, output format and limits,
 * searching in the sandbox (pi's own runs a local ripgrep). options.grep:
 * 'rg', 'grep' (POSIX), or 'auto' (default: rg when the sandbox has it).
 */
export function createAspGrepToolDefinition(sandbox, workspace, options = {}) {
	const sb = typeof sandbox === 'function' ? sandbox : () => sandbox;
	const base = createGrepToolDefinition(workspace);
	const cache = {};
	return {
		...base,
		async execute(_toolCallId, params, signal) {
			if (signal?.aborted)
				throw abortedError();
			const searchPath = resolveIn(workspace, params.path || '.');
			let isDirectory;
			try {
				const st = await fsCall('stat', searchPath, async (o) => (await sb()).stat(searchPath, o));
				isDirectory = st.type === 'directory';
			} catch (e) {
				if (e.code === 'ENOENT' || e.code === 'ENOTDIR' || e.code === 'EACCES')
					throw modelSafe(new Error(`Path not found: ${searchPath}`));
				throw e;
			}
			const contextValue = params.context && params.context > 0 ? params.context : 0;
			const limit = Math.max(1, params.limit ?? GREP_DEFAULT_LIMIT);
			const backend = await grepBackend(sb, options.grep, cache);
			const { matches, limitReached } = backend === 'rg'
				? await grepWithRg(sb, params, searchPath, limit, signal)
				: await grepWithPosix(sb, params, searchPath, isDirectory, limit, signal);
			if (signal?.aborted)
				throw abortedError();
			if (!matches.length)
				return { content: [{ type: 'text', text: 'No matches found' }], details: undefined };

			/* From here on, pi's formatting (pi: dist/core/tools/grep.js). */
			const formatPath = (filePath) => {
				if (isDirectory) {
					const relative = path.posix.relative(searchPath, filePath);
					if (relative && !relative.startsWith('..'))
						return relative;
				}
				return path.posix.basename(filePath);
			};
			let linesTruncated = false;
			const fileCache = new Map();
			const getFileLines = async (filePath) => {
				let lines = fileCache.get(filePath);
				if (!lines) {
					try {
						const content = (await fsCall('readFile', filePath, async (o) => (await sb()).read(filePath, o))).toString();
						lines = content.replace(/\r\n/g, '\n').replace(/\r/g, '\n').split('\n');
					} catch {
						lines = [];
					}
					fileCache.set(filePath, lines);
				}
				return lines;
			};
			const outputLines = [];
			for (const match of matches) {
				const relativePath = formatPath(match.filePath);
				if (contextValue === 0 && match.lineText !== undefined) {
					const sanitized = match.lineText.replace(/\r\n/g, '\n').replace(/\r/g, '').replace(/\n$/, '');
					const { text, wasTruncated } = truncateLine(sanitized);
					if (wasTruncated)
						linesTruncated = true;
					outputLines.push(`${relativePath}:${match.lineNumber}: ${text}`);
					continue;
				}
				const lines = await getFileLines(match.filePath);
				if (!lines.length) {
					outputLines.push(`${relativePath}:${match.lineNumber}: (unable to read file)`);
					continue;
				}
				const start = contextValue > 0 ? Math.max(1, match.lineNumber - contextValue) : match.lineNumber;
				const end = contextValue > 0 ? Math.min(lines.length, match.lineNumber + contextValue) : match.lineNumber;
				for (let current = start; current <= end; current++) {
					const { text, wasTruncated } = truncateLine((lines[current - 1] ?? '').replace(/\r/g, ''));
					if (wasTruncated)
						linesTruncated = true;
					outputLines.push(current === match.lineNumber
						? `${relativePath}:${current}: ${text}`
						: `${relativePath}-${current}- ${text}`);
				}
			}
			const truncation = truncateHead(outputLines.join('\n'), { maxLines: Number.MAX_SAFE_INTEGER });
			let output = truncation.content;
			const details = {};
			const notices = [];
			if (limitReached) {
				notices.push(`${limit} matches limit reached. Use limit=${limit * 2} for more, or refine pattern`);
				details.matchLimitReached = limit;
			}
			if (truncation.truncated) {
				notices.push(`${formatSize(DEFAULT_MAX_BYTES)} limit reached`);
				details.truncation = truncation;
			}
			if (linesTruncated) {
				notices.push(`Some lines truncated to ${GREP_MAX_LINE_LENGTH} chars. Use read tool to see full lines`);
				details.linesTruncated = true;
			}
			if (notices.length > 0)
				output += `\n\n[${notices.join('. ')}]`;
			return {
				content: [{ type: 'text', text: output }],
				details: Object.keys(details).length > 0 ? details : undefined,
			};
		},
	};
}

/*
 * pi's bash output, kept as pi's OutputAccumulator keeps it (pi:
 * dist/core/tools/output-accumulator.js) but without its local temp file:
 * only totals and a bounded tail live on the harness. The full output is
 * written in the sandbox by the command's wrapper (bashInSandbox).
 */
class OutputTail {
	constructor() {
		this.maxLines = DEFAULT_MAX_LINES;
		this.maxBytes = DEFAULT_MAX_BYTES;
		this.maxRollingBytes = Math.max(this.maxBytes * 2, 1);
		this.decoder = new TextDecoder();
		this.tailText = '';
		this.tailBytes = 0;
		this.tailStartsAtLineBoundary = true;
		this.totalRawBytes = 0;
		this.totalDecodedBytes = 0;
		this.totalLines = 1;
		this.currentLineBytes = 0;
		this.finished = false;
	}

	append(data) {
		this.totalRawBytes += data.length;
		this.appendDecoded(this.decoder.decode(data, { stream: true }));
	}

	finish() {
		if (!this.finished)
			this.appendDecoded(this.decoder.decode());
		this.finished = true;
	}

	appendDecoded(text) {
		if (!text.length)
			return;
		const bytes = Buffer.byteLength(text);
		this.totalDecodedBytes += bytes;
		this.tailText += text;
		this.tailBytes += bytes;
		if (this.tailBytes > this.maxRollingBytes * 2) {
			const buffer = Buffer.from(this.tailText);
			let start = buffer.length - this.maxRollingBytes;
			while (start < buffer.length && (buffer[start] & 0xc0) === 0x80)
				start++;
			this.tailStartsAtLineBoundary = buffer[start - 1] === 0x0a;
			this.tailText = buffer.subarray(start).toString();
			this.tailBytes = Buffer.byteLength(this.tailText);
		}
		let newlines = 0;
		let last = -1;
		for (let i = text.indexOf('\n'); i !== -1; i = text.indexOf('\n', i + 1)) {
			newlines++;
			last = i;
		}
		if (newlines === 0) {
			this.currentLineBytes += bytes;
		} else {
			this.totalLines += newlines;
			this.currentLineBytes = Buffer.byteLength(text.slice(last + 1));
		}
	}

	get truncated() {
		return this.totalLines > this.maxLines || this.totalDecodedBytes > this.maxBytes;
	}

	snapshot() {
		let text = this.tailText;
		if (!this.tailStartsAtLineBoundary) {
			const nl = text.indexOf('\n');
			text = nl === -1 ? text : text.slice(nl + 1);
		}
		const tail = truncateTail(text, { maxLines: this.maxLines, maxBytes: this.maxBytes });
		const truncated = this.truncated;
		return {
			...tail,
			truncated,
			truncatedBy: truncated ? (tail.truncatedBy ?? (this.totalDecodedBytes > this.maxBytes ? 'bytes' : 'lines')) : null,
			totalLines: this.totalLines,
			totalBytes: this.totalDecodedBytes,
			maxLines: this.maxLines,
			maxBytes: this.maxBytes,
		};
	}
}

/* Raw output up to this cannot be truncated (a byte decodes to at most 3): the wrapper removes its file. */
const SURELY_WHOLE_BYTES = Math.floor(DEFAULT_MAX_BYTES / 3);

/*
 * The command, run so that its whole output (stdout and stderr, as pi
 * merges them) is also written to `file` in the sandbox, created 0600 and
 * never over an existing one; its exit status is the command's. The file
 * is removed when the output is surely too small to be truncated, also
 * when a timeout or cancel ends the command.
 */
function bashInSandbox(command, file) {
	const q = shq(command);
	return `_pi_f=${shq(file)}; ` +
		`_pi_c() { [ "$(wc -c < "$_pi_f")" -le ${SURELY_WHOLE_BYTES} ] && [ "$(wc -l < "$_pi_f")" -lt ${DEFAULT_MAX_LINES} ] && rm -f "$_pi_f"; }; ` +
		`if ( umask 077; set -C; : > "$_pi_f" ) 2>/dev/null; then ` +
		/* A timeout or cancel (SIGTERM to the group) still removes a small file; the command's subshell has no trap. */
		`trap '_pi_c; exit 143' TERM; ` +
		`{ _pi_s=$( { { ( unset _pi_f; unset -f _pi_c; eval ' '${q} ) 4>&- 5>&-; echo $? >&4; } 2>&1 | tee "$_pi_f" >&5 4>&-; } 4>&1 ); } 5>&1; ` +
		`_pi_c; exit "\${_pi_s:-1}"; ` +
		`else unset _pi_f; unset -f _pi_c; eval ' '${q}; fi`;
}

/*
 * pi's bash tool (schema, description, rendering, output format and
 * messages: pi dist/core/tools/bash.js), with the full output of a
 * truncated command in the sandbox, at the path the model is given. The
 * harness keeps a bounded tail and writes no file.
 */
export function createAspBashToolDefinition(sandbox, workspace, ops) {
	const sb = typeof sandbox === 'function' ? sandbox : () => sandbox;
	const base = createBashToolDefinition(workspace, { operations: ops });
	return {
		...base,
		async execute(_toolCallId, { command, timeout }, signal, onUpdate) {
			const fullOutputPath = `/tmp/pi-bash-${crypto.randomBytes(8).toString('hex')}.log`;
			const output = new OutputTail();
			let timer;
			let dirty = false;
			let lastAt = 0;
			const details = (truncation) => (truncation.truncated ? { truncation, fullOutputPath } : undefined);
			const emit = () => {
				if (!onUpdate || !dirty)
					return;
				dirty = false;
				lastAt = Date.now();
				const t = output.snapshot();
				onUpdate({ content: [{ type: 'text', text: t.content || '' }], details: { truncation: t.truncated ? t : undefined, fullOutputPath: t.truncated ? fullOutputPath : undefined } });
			};
			const schedule = () => {
				if (!onUpdate)
					return;
				dirty = true;
				const delay = BASH_UPDATE_THROTTLE_MS - (Date.now() - lastAt);
				if (delay <= 0) {
					clearTimeout(timer);
					timer = undefined;
					emit();
					return;
				}
				timer ??= setTimeout(() => {
					timer = undefined;
					emit();
				}, delay);
			};
			if (onUpdate)
				onUpdate({ content: [], details: undefined });
			const finish = (ended) => {
				output.finish();
				clearTimeout(timer);
				timer = undefined;
				emit();
				const t = output.snapshot();
				/*
				 * A file the model is not told of goes: one the wrapper kept (it
				 * could not tell) or could not remove (a timeout killed it). Not
				 * after an abort: that may be pi shutting down.
				 */
				if (!t.truncated && !signal?.aborted && (!ended || output.totalRawBytes > SURELY_WHOLE_BYTES))
					sb().then((s) => s.exec(`rm -f ${shq(fullOutputPath)}`)).catch(() => {});
				return t;
			};
			const format = (t, emptyText = '(no output)') => {
				let text = t.content || emptyText;
				if (t.truncated) {
					const startLine = t.totalLines - t.outputLines + 1;
					const endLine = t.totalLines;
					if (t.lastLinePartial)
						text += `\n\n[Showing last ${formatSize(t.outputBytes)} of line ${endLine} (line is ${formatSize(output.currentLineBytes)}). Full output: ${fullOutputPath}]`;
					else if (t.truncatedBy === 'lines')
						text += `\n\n[Showing lines ${startLine}-${endLine} of ${t.totalLines}. Full output: ${fullOutputPath}]`;
					else
						text += `\n\n[Showing lines ${startLine}-${endLine} of ${t.totalLines} (${formatSize(DEFAULT_MAX_BYTES)} limit). Full output: ${fullOutputPath}]`;
				}
				return text;
			};
			const withStatus = (text, status) => `${text ? `${text}\n\n` : ''}${status}`;
			let exitCode;
			try {
				({ exitCode } = await ops.exec(bashInSandbox(command, fullOutputPath), workspace, {
					onData: (data) => {
						output.append(data);
						schedule();
					},
					signal,
					timeout,
				}));
			} catch (err) {
				const text = format(finish(false), '');
				if (err instanceof Error && err.message === 'aborted')
					throw modelSafe(new Error(withStatus(text, 'Command aborted')));
				if (err instanceof Error && err.message.startsWith('timeout:'))
					throw modelSafe(new Error(withStatus(text, `Command timed out after ${err.message.split(':')[1]} seconds`)));
				throw err;
			} finally {
				clearTimeout(timer);
			}
			const t = finish(true);
			const text = format(t);
			if (exitCode !== 0 && exitCode !== null)
				throw modelSafe(new Error(withStatus(text, `Command exited with code ${exitCode}`)));
			return { content: [{ type: 'text', text }], details: details(t) };
		},
	};
}

/* pi's throttle for streaming bash updates (pi: dist/core/tools/bash.js). */
const BASH_UPDATE_THROTTLE_MS = 100;

/*
 * Harness details that must never reach the model, from the config file
 * (its path, the host, host:port, the identity file). A tool error that
 * still holds one is replaced (defence in depth behind modelError).
 */
function harnessSecrets(configPath, configText) {
	const out = [];
	if (configPath)
		out.push(configPath);
	try {
		const c = JSON.parse(configText ?? fs.readFileSync(configPath, 'utf8')).connection || {};
		if (typeof c.host === 'string' && c.host) {
			out.push(c.host);
			if (c.port !== undefined)
				out.push(`${c.host}:${c.port}`, `port ${c.port}`);
		}
		if (typeof c.identity === 'string' && c.identity)
			out.push(c.identity);
	} catch {
		/* an unreadable config opened nothing */
	}
	return out;
}

/*
 * A tool as the model calls it: `~` is the sandbox home, the call's signal
 * and pi context reach the operations, and the error that comes back holds
 * nothing of the harness.
 */
function guarded(def, { home, secrets, reporter, stop }) {
	return {
		...def,
		async execute(toolCallId, params, signal, onUpdate, ctx) {
			signal = withStop(signal, stop);
			return callContext.run({ signal, ctx, report: reporter }, async () => {
				try {
					const p = params?.path;
					if (home && typeof p === 'string' && /^@?~(\/|$)/.test(p))
						params = { ...params, path: (await home()) + p.replace(/^@?~/, '') };
					return await def.execute(toolCallId, params, signal, onUpdate, ctx);
				} catch (e) {
					const text = e instanceof Error ? e.message : String(e);
					if (secrets().some((s) => text.includes(s)))
						throw unavailableError(e);
					throw e;
				}
			});
		},
	};
}

/**
 * pi tool definitions (read, write, edit, bash, grep, find, ls) that run in
 * the sandbox, with the sandbox workspace as their working directory.
 * options: workspace, env (see createAspOperations), grep (see
 * createAspGrepToolDefinition), config (its path, kept out of tool errors),
 * report(message, ctx) (where libasp's full messages go).
 */
export function createAspToolDefinitions(sandbox, options = {}) {
	const sb = typeof sandbox === 'function' ? sandbox : () => sandbox;
	const workspace = options.workspace ?? sandbox.workspace;
	const ops = createAspOperations(sb, options);
	let homeDir = null;
	const home = async () => {
		if (homeDir === null) {
			const r = await sandboxRun(sb, 'printf %s "$HOME"', { signal: callContext.getStore()?.signal });
			homeDir = r.stdout.toString() || '/';
		}
		return homeDir;
	};
	let secretList = null;
	const secrets = () => (secretList ??= options.config ? harnessSecrets(options.config, options.configText) : []);
	return [
		createReadToolDefinition(workspace, { operations: ops.read }),
		createWriteToolDefinition(workspace, { operations: ops.write }),
		createEditToolDefinition(workspace, { operations: ops.edit }),
		createAspBashToolDefinition(sb, workspace, ops.bash),
		createAspGrepToolDefinition(sb, workspace, options),
		createFindToolDefinition(workspace, { operations: ops.find }),
		createLsToolDefinition(workspace, { operations: ops.ls }),
	].map((def) => guarded(def, { home, secrets, reporter: options.report, stop: options.stop }));
}

/* pi's tools, failing: the sandbox cannot be used, and pi must not act locally instead. */
function failClosed(cwd, reporter, message) {
	const defs = [
		createReadToolDefinition(cwd),
		createWriteToolDefinition(cwd),
		createEditToolDefinition(cwd),
		createBashToolDefinition(cwd),
		createGrepToolDefinition(cwd),
		createFindToolDefinition(cwd),
		createLsToolDefinition(cwd),
	];
	return defs.map((def) => ({
		...def,
		async execute(_id, _params, _signal, _onUpdate, ctx) {
			reporter(message, ctx);
			throw new Error(`${def.name} cannot run: ${UNAVAILABLE}`);
		},
	}));
}

/*
 * Where libasp's full messages go: pi's notifications when it has a UI,
 * else stderr (never a tool result).
 */
function defaultReport(message, ctx) {
	if (ctx?.hasUI)
		ctx.ui.notify(`pi-asp: ${message}`, 'error');
	else
		process.stderr.write(`pi-asp: ${message}\n`);
}

/* pi's context file names, in its order of preference (pi: dist/core/resource-loader.js). */
const CONTEXT_FILE_NAMES = ['AGENTS.md', 'AGENTS.MD', 'CLAUDE.md', 'CLAUDE.MD'];
/* A context file from the sandbox is cut here: nothing unbounded crosses from it. */
export const CONTEXT_FILE_MAX_BYTES = 256 * 1024;

/*
 * The context files pi would load for the workspace, from the sandbox: in
 * each directory from / down to the workspace, the first of AGENTS.md,
 * AGENTS.MD, CLAUDE.md, CLAUDE.MD, named by its sandbox path.
 */
export async function sandboxContextFiles(sandbox, workspace, { signal } = {}) {
	const dirs = [];
	for (let d = workspace; ; d = path.posix.dirname(d)) {
		dirs.unshift(d);
		if (path.posix.dirname(d) === d)
			break;
	}
	const out = [];
	for (const dir of dirs) {
		for (const name of CONTEXT_FILE_NAMES) {
			const file = path.posix.join(dir, name);
			try {
				const data = await sandbox.read(file, { limit: CONTEXT_FILE_MAX_BYTES, ...(signal ? { signal } : {}) });
				out.push({ path: file, content: data.toString() });
				break;
			} catch (e) {
				if (e instanceof asp.AspError && ['ASP_ENOENT', 'ASP_EACCES', 'ASP_EISDIR', 'ASP_ENOTDIR'].includes(e.code))
					continue;
				throw e;
			}
		}
	}
	return out;
}

function contextSection(files) {
	if (!files?.length)
		return '';
	return '\n\n# Project Context\n\nProject-specific instructions and guidelines:\n\n' +
		files.map((f) => `## ${f.path}\n\n${f.content}\n\n`).join('');
}

/*
 * pi's system prompt as the sandbox would have it: the working directory is
 * the workspace; the context files are the sandbox's (pi loaded the
 * harness's, under harness paths); and what names harness files the model
 * could not read anyway is left out: pi's documentation paths (its
 * node_modules) and the skills list (skill files on the harness).
 */
export function sandboxSystemPrompt(systemPrompt, options, workspace, contextFiles) {
	let p = systemPrompt;
	const cut = (text) => {
		if (text)
			p = p.split(text).join('');
	};
	cut(contextSection(options?.contextFiles));
	cut(options?.skills?.length ? formatSkillsForPrompt(options.skills) : '');
	p = p.replace(/\n\nPi documentation \(read only when[^\n]*(?:\n- [^\n]*)*/, '');
	const date = p.lastIndexOf('\nCurrent date: ');
	const at = date >= 0 ? date : p.length;
	p = p.slice(0, at) + contextSection(contextFiles) + p.slice(at);
	const cwdLine = /\nCurrent working directory: [^\n]*$/;
	const line = `\nCurrent working directory: ${workspace}`;
	return cwdLine.test(p) ? p.replace(cwdLine, () => line) : p + line;
}

/*
 * The workspace a config names, when it cannot be opened (host key,
 * sandbox down): a lazy open validates it without connecting; a config
 * that is not valid names none, and "/" stands in.
 */
async function configWorkspace(configPath, configText) {
	if (!configPath)
		return '/';
	try {
		const s = await asp.open({ config: configPath, configText, lazy: true });
		const w = s.workspace;
		await s.close();
		return w;
	} catch {
		return '/';
	}
}

/* pi's --no-context-files: the sandbox's context files are not loaded either. */
const noContextFiles = () => process.argv.includes('--no-context-files') || process.argv.includes('-nc');

/*
 * Shutdown: a signal that ends pi must not wait for remote commands. Every
 * live instance's calls are aborted at once (libasp kills their remote
 * process groups). SIGTERM and SIGHUP: pi's own handler then disposes the
 * session (session_shutdown closes the sandbox) and exits; where pi has none,
 * and always for SIGINT (print mode leaves it to Node), the sandboxes are
 * closed and the process exits as a shell reports a signal's death (128 + n).
 */
const liveInstances = new Set();
let signalsInstalled = false;
function installSignalHandlers() {
	if (signalsInstalled)
		return;
	signalsInstalled = true;
	for (const sig of ['SIGTERM', 'SIGHUP', 'SIGINT']) {
		const handler = () => {
			const alone = process.listenerCount(sig) === 1;
			for (const inst of liveInstances)
				inst.abort();
			if (sig !== 'SIGINT' && !alone)
				return;
			Promise.allSettled([...liveInstances].map((inst) => inst.close())).finally(() =>
				process.exit(128 + os.constants.signals[sig]));
		};
		process.on(sig, handler);
	}
}

let toldNoConfig = false;

/**
 * The pi extension. options (for embedding and tests): startDir (default
 * process.cwd()), config (an explicit .asp.json), open (extra asp.open
 * options), env, grep, report(message, ctx) (default: pi notification, else
 * stderr).
 */
export function createPiAspExtension(options = {}) {
	return async function piAsp(pi) {
		const startDir = options.startDir ?? process.cwd();
		const reporter = options.report ?? defaultReport;
		defaultReporter = reporter;

		/*
		 * The sandbox cannot be used: say why to the user, and let no tool
		 * run locally. The model still sees the workspace as its working
		 * directory, and nothing of the harness.
		 */
		const refuse = async (e, configPath, configText) => {
			const message = `the sandbox cannot be used, so every tool will fail: ${e.message}`;
			const workspace = await configWorkspace(configPath, configText);
			for (const def of failClosed(workspace, reporter, message))
				pi.registerTool(def);
			let told = false;
			pi.on('session_start', (_event, ctx) => {
				if (!told)
					reporter(message, ctx);
				told = true;
			});
			pi.on('before_agent_start', (event) =>
				({ systemPrompt: sandboxSystemPrompt(event.systemPrompt, event.systemPromptOptions, workspace, []) }));
		};

		/*
		 * A discovered .asp.json is judged and read through one descriptor
		 * (readConfig): the text is what every open below uses, never the
		 * path again, which another user could have swapped meanwhile.
		 */
		let configPath = options.config;
		let configText;
		if (!configPath) {
			/* A set $ASP_CONFIG is the user's intent, even empty: never the local machine instead. */
			if (process.env.ASP_CONFIG === '') {
				await refuse(new Error('ASP_CONFIG is set but empty: unset it, or name a .asp.json'));
				return;
			}
			try {
				({ path: configPath, text: configText } = await asp.readConfig(startDir));
			} catch (e) {
				/* No .asp.json anywhere: pi stays local (said once, so a user notices). An $ASP_CONFIG that names none is a broken config. */
				if (e instanceof asp.AspError && e.code === 'ASP_ENOCONFIG' && process.env.ASP_CONFIG === undefined) {
					if (!toldNoConfig)
						process.stderr.write(`pi-asp: no .asp.json in ${startDir} or its parents, and ASP_CONFIG is not set: pi's tools run on this machine\n`);
					toldNoConfig = true;
					return;
				}
				await refuse(e, process.env.ASP_CONFIG);
				return;
			}
		}

		/* The sandbox is opened now (so a wrong host key shows at startup) and reopened after session_shutdown. */
		let sandbox = null;
		let opening = null;
		const open = () => {
			opening ??= asp.open({ ...(options.open || {}), config: configPath, configText }).then((s) => {
				sandbox = s;
				return s;
			}, (e) => {
				opening = null;
				throw e;
			});
			return opening;
		};
		let first;
		try {
			first = await open();
		} catch (e) {
			await refuse(e, configPath, configText);
			return;
		}
		const workspace = first.workspace;
		const current = () => (sandbox ? Promise.resolve(sandbox) : open());
		/* Aborted at shutdown: every call in flight ends, and its remote process group with it. */
		let stopAll = new AbortController();
		const toolOptions = {
			workspace, env: options.env, grep: options.grep, config: configPath, configText, report: reporter,
			stop: () => stopAll.signal,
		};
		const closeSandbox = async () => {
			const s = sandbox;
			sandbox = null;
			opening = null;
			if (s)
				await s.close();
		};
		const instance = {
			abort() {
				stopAll.abort();
				stopAll = new AbortController();
			},
			close: closeSandbox,
		};
		liveInstances.add(instance);
		installSignalHandlers();

		for (const def of createAspToolDefinitions(current, toolOptions))
			pi.registerTool(def);

		const ops = createAspOperations(current, toolOptions);
		/* `!cmd` and `!!cmd` typed by the user run in the sandbox too. */
		pi.on('user_bash', () => ({ operations: ops.bash }));

		/*
		 * The model sees the sandbox's working directory as its own, the
		 * sandbox's context files, and nothing of the harness. Context files
		 * are read once a session.
		 */
		let context = null;
		pi.on('before_agent_start', async (event) => {
			if (!noContextFiles()) {
				context ??= current().then((s) => sandboxContextFiles(s, workspace)).catch((e) => {
					report(e);
					context = null;
					return [];
				});
			}
			const files = noContextFiles() ? [] : await context;
			return { systemPrompt: sandboxSystemPrompt(event.systemPrompt, event.systemPromptOptions, workspace, files) };
		});

		pi.on('session_shutdown', async () => {
			instance.abort();
			context = null;
			await closeSandbox();
		});
	};
}

export default createPiAspExtension();
