/*
 * pi-asp: run the pi coding agent's tools in an ASP sandbox.
 *
 * When a .asp.json is found ($ASP_CONFIG, else the working directory and its
 * parents), pi's built-in read, write, edit and bash tools (and `!` user
 * commands) keep their schemas, truncation and rendering, but their
 * operations go to the sandbox through libasp: files over SFTP, commands in
 * a fresh remote shell with streaming output, timeouts and cancellation that
 * kill the whole remote process group.
 *
 *   pi -e ./examples/node/pi-asp          (or list it in settings.json)
 *
 * Without a .asp.json the extension does nothing and pi stays local. With
 * one that cannot be used, the tools fail with the reason: they never fall
 * back to the local machine.
 */

import os from 'node:os';
import path from 'node:path';

import {
	createBashToolDefinition,
	createEditToolDefinition,
	createReadToolDefinition,
	createWriteToolDefinition,
} from '@mariozechner/pi-coding-agent';
import { fileTypeFromBuffer } from 'file-type';
import asp from 'libasp';

/* What pi's read tool accepts as images (pi: dist/utils/mime.js). */
const IMAGE_MIME_TYPES = new Set(['image/jpeg', 'image/png', 'image/gif', 'image/webp']);
const FILE_TYPE_SNIFF_BYTES = 4100;

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
	ASP_EIO: ['EIO', 'i/o error'],
};

export function toNodeError(e, syscall, file) {
	if (!(e instanceof asp.AspError) || !NODE_ERRORS[e.code])
		return e;
	const [code, text] = NODE_ERRORS[e.code];
	const err = new Error('', { cause: e });
	err.code = code;
	err.errno = -(os.constants.errno[code] ?? 0);
	if (syscall === 'readFile') {
		/* fs.readFile opens a directory fine and fails in read(2), naming no path. */
		err.syscall = code === 'EISDIR' ? 'read' : 'open';
	} else {
		err.syscall = syscall;
	}
	if (err.syscall === 'read') {
		err.message = `${code}: ${text}, read`;
	} else {
		err.path = file;
		err.message = `${code}: ${text}, ${err.syscall} '${file}'`;
	}
	return err;
}

async function fsCall(syscall, file, fn) {
	try {
		return await fn();
	} catch (e) {
		throw toNodeError(e, syscall, file);
	}
}

/**
 * pi operations objects backed by a libasp Sandbox:
 * { read: ReadOperations, write: WriteOperations, edit: EditOperations, bash: BashOperations }.
 *
 * options.env: names of local environment variables to pass to remote
 * commands. By default none is: pi hands its bash operations the whole local
 * environment (API keys included), and that must not reach the sandbox.
 */
export function createAspOperations(sandbox, options = {}) {
	const sb = typeof sandbox === 'function' ? sandbox : () => sandbox;
	const forward = options.env || [];

	const readFile = (file) => fsCall('readFile', file, async () => (await sb()).read(file));
	/* fs.access(R_OK): an open for reading, without reading (a directory passes, as locally). */
	const canRead = (file) => fsCall('access', file, async () => {
		await (await sb()).read(file, { limit: 0 });
	});
	/* fs.access(W_OK): only the sandbox's own test(1) knows its users and ACLs. */
	const canWrite = async (file) => {
		const r = await (await sb()).exec('test -w "$ASP_PATH"', { env: { ASP_PATH: file } });
		if (r.exitCode !== 0)
			throw toNodeError(new asp.AspError(asp.codes.ASP_EACCES, `${file}: not writable`), 'access', file);
	};
	const writeFile = (file, content) => fsCall('open', file, async () => (await sb()).write(file, content));
	const mkdir = (dir) => fsCall('mkdir', dir, async () => (await sb()).mkdir(dir, { parents: true }));

	const read = {
		readFile,
		access: canRead,
		async detectImageMimeType(file) {
			const head = await fsCall('readFile', file, async () =>
				(await sb()).read(file, { limit: FILE_TYPE_SNIFF_BYTES }));
			if (!head.length)
				return null;
			const type = await fileTypeFromBuffer(head);
			return type && IMAGE_MIME_TYPES.has(type.mime) ? type.mime : null;
		},
	};

	const bash = {
		/* The contract of pi's BashOperations.exec (pi: dist/core/tools/bash.js, createLocalBashOperations). */
		async exec(command, cwd, { onData, signal, timeout }) {
			const env = {};
			for (const name of forward)
				if (process.env[name] !== undefined)
					env[name] = process.env[name];
			let r;
			try {
				r = await (await sb()).exec(command, {
					cwd,
					env,
					signal,
					timeout: timeout !== undefined && timeout > 0 ? timeout * 1000 : 0,
					onData: (_stream, chunk) => onData(chunk),
					/* pi accumulates the output from onData; libasp need not keep a copy. */
					maxOutput: 1,
				});
			} catch (e) {
				if (e instanceof asp.AspError && e.code === 'ASP_ECANCELLED')
					throw new Error('aborted', { cause: e });
				if (e instanceof asp.AspError && e.code === 'ASP_ENOENT')
					throw new Error(`Working directory does not exist: ${cwd}\nCannot execute bash commands.`, { cause: e });
				throw e;
			}
			if (r.cancelled || signal?.aborted)
				throw new Error('aborted');
			if (r.timedOut)
				throw new Error(`timeout:${timeout}`);
			return { exitCode: r.exitCode };
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
	};
}

/*
 * pi expands `~` with the local home directory (pi: dist/core/tools/path-utils.js,
 * expandPath); in the sandbox `~` is the sandbox user's home.
 */
function withRemoteHome(def, home) {
	return {
		...def,
		async execute(toolCallId, params, ...rest) {
			const p = params?.path;
			if (typeof p === 'string' && /^@?~(\/|$)/.test(p)) {
				const rel = p.replace(/^@?~/, '');
				params = { ...params, path: (await home()) + rel };
			}
			return def.execute(toolCallId, params, ...rest);
		},
	};
}

/**
 * pi tool definitions (read, write, edit, bash) that run in the sandbox,
 * with the sandbox workspace as their working directory.
 */
export function createAspToolDefinitions(sandbox, options = {}) {
	const sb = typeof sandbox === 'function' ? sandbox : () => sandbox;
	const workspace = options.workspace ?? sandbox.workspace;
	const ops = createAspOperations(sb, options);
	let homeDir = null;
	const home = async () => {
		if (homeDir === null) {
			const r = await (await sb()).exec('printf %s "$HOME"');
			homeDir = r.stdout.toString() || '/';
		}
		return homeDir;
	};
	return [
		createReadToolDefinition(workspace, { operations: ops.read }),
		createWriteToolDefinition(workspace, { operations: ops.write }),
		createEditToolDefinition(workspace, { operations: ops.edit }),
		createBashToolDefinition(workspace, { operations: ops.bash }),
	].map((def) => withRemoteHome(def, home));
}

/* Tools that say why the sandbox cannot be used, instead of running locally. */
function failClosed(error, cwd) {
	const defs = [
		createReadToolDefinition(cwd),
		createWriteToolDefinition(cwd),
		createEditToolDefinition(cwd),
		createBashToolDefinition(cwd),
	];
	return defs.map((def) => ({
		...def,
		async execute() {
			throw new Error(`The ASP sandbox is not available, so ${def.name} cannot run: ${error.message}`);
		},
	}));
}

/**
 * The pi extension. options (for embedding and tests): startDir (default
 * process.cwd()), config (an explicit .asp.json), open (extra asp.open options).
 */
export function createPiAspExtension(options = {}) {
	return async function piAsp(pi) {
		const startDir = options.startDir ?? process.cwd();
		let configPath = options.config;
		if (!configPath) {
			try {
				configPath = await asp.findConfig(startDir);
			} catch (e) {
				if (e instanceof asp.AspError && e.code === 'ASP_ENOCONFIG')
					return; /* no sandbox: pi stays local */
				for (const def of failClosed(e, startDir))
					pi.registerTool(def);
				return;
			}
		}

		/* The sandbox is opened now (so a wrong host key shows at startup) and reopened after session_shutdown. */
		let sandbox = null;
		let opening = null;
		const open = () => {
			opening ??= asp.open({ ...(options.open || {}), config: configPath }).then((s) => {
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
			for (const def of failClosed(e, startDir))
				pi.registerTool(def);
			return;
		}
		const workspace = first.workspace;
		const current = () => (sandbox ? Promise.resolve(sandbox) : open());

		for (const def of createAspToolDefinitions(current, { workspace, env: options.env }))
			pi.registerTool(def);

		const ops = createAspOperations(current, { env: options.env });
		/* `!cmd` and `!!cmd` typed by the user run in the sandbox too. */
		pi.on('user_bash', () => ({ operations: ops.bash }));

		/* The model should see the sandbox's working directory, not ours. */
		pi.on('before_agent_start', (event) => {
			const local = `Current working directory: ${startDir.replace(/\\/g, '/')}`;
			if (event.systemPrompt.includes(local))
				return {
					systemPrompt: event.systemPrompt.replace(local,
						`Current working directory: ${workspace} (ASP sandbox, ${path.basename(configPath)})`),
				};
			return undefined;
		});

		pi.on('session_shutdown', async () => {
			const s = sandbox;
			sandbox = null;
			opening = null;
			if (s)
				await s.close();
		});
	};
}

export default createPiAspExtension();
