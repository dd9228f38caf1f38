/*
 * The real pi program (its CLI, print mode) with this extension loaded by
 * `-e`, talking to a scripted model: a small OpenAI-compatible chat
 * completions server on 127.0.0.1 that answers each request with the next
 * step of a script (a tool call or a text) and keeps every request body, so
 * a test sees exactly what pi sent the model.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const extensionPath = path.resolve(here, '..', 'index.js');
export const piPackageDir = path.resolve(here, '..', 'node_modules', '@mariozechner', 'pi-coding-agent');
const piCli = path.join(piPackageDir, 'dist', 'cli.js');

/*
 * steps: each is { tool, args } (one tool call), { text } (a final answer),
 * or a function (body) -> one of those. After the last step the model
 * answers "done".
 */
export async function startModel(steps) {
	const bodies = [];
	let n = 0;
	let callId = 0;
	const server = http.createServer((req, res) => {
		const chunks = [];
		req.on('data', (c) => chunks.push(c));
		req.on('end', () => {
			let body;
			try {
				body = JSON.parse(Buffer.concat(chunks).toString());
			} catch {
				res.writeHead(400).end();
				return;
			}
			bodies.push(body);
			let step = steps[n++] ?? { text: 'done' };
			if (typeof step === 'function')
				step = step(body);
			const base = { id: `chatcmpl-${n}`, object: 'chat.completion.chunk', created: 0, model: body.model };
			const send = (choice) => res.write(`data: ${JSON.stringify({ ...base, choices: [{ index: 0, ...choice }] })}\n\n`);
			res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
			if (step.tool) {
				send({ delta: { role: 'assistant', content: null, tool_calls: [{ index: 0, id: `call_${++callId}`, type: 'function',
					function: { name: step.tool, arguments: JSON.stringify(step.args ?? {}) } }] }, finish_reason: null });
				send({ delta: {}, finish_reason: 'tool_calls' });
			} else {
				send({ delta: { role: 'assistant', content: step.text }, finish_reason: null });
				send({ delta: {}, finish_reason: 'stop' });
			}
			res.write(`data: ${JSON.stringify({ ...base, choices: [], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } })}\n\n`);
			res.end('data: [DONE]\n\n');
		});
	});
	await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
	return {
		url: `http://127.0.0.1:${server.address().port}/v1`,
		bodies,
		/* The system prompt pi sent with the first request. */
		systemPrompt() {
			const m = bodies[0]?.messages?.find((x) => x.role === 'system' || x.role === 'developer');
			return typeof m?.content === 'string' ? m.content : JSON.stringify(m?.content);
		},
		/* Every tool result text pi sent back, in order. */
		toolResults() {
			const last = bodies[bodies.length - 1]?.messages ?? [];
			return last.filter((m) => m.role === 'tool').map((m) => (typeof m.content === 'string' ? m.content : JSON.stringify(m.content)));
		},
		close: () => new Promise((resolve) => server.close(resolve)),
	};
}

/* An agent directory whose models.json names the scripted model; no auth, no settings of the user's. */
export function makeAgentDir(modelUrl) {
	const dir = fs.mkdtempSync('/tmp/pi-asp-realpi-agent.');
	fs.writeFileSync(path.join(dir, 'models.json'), JSON.stringify({
		providers: {
			scripted: {
				baseUrl: modelUrl, api: 'openai-completions', apiKey: 'scripted-key',
				compat: { supportsDeveloperRole: false, supportsReasoningEffort: false },
				models: [{ id: 'scripted-model', reasoning: false, input: ['text'], contextWindow: 128000, maxTokens: 4096 }],
			},
		},
	}));
	return dir;
}

/*
 * `pi -p` in cwd, with env on top of this process's; returns the child and
 * a promise of { code, signal, stdout, stderr }.
 */
export function runPi({ cwd, agentDir, env = {}, prompt = 'go', args = [] }) {
	const childEnv = { ...process.env, PI_CODING_AGENT_DIR: agentDir, PI_OFFLINE: '1', ...env };
	for (const [k, v] of Object.entries(env))
		if (v === undefined)
			delete childEnv[k];
	const child = spawn(process.execPath, [piCli, '-p', '--no-session', '--offline',
		'--provider', 'scripted', '--model', 'scripted-model', '-e', extensionPath, ...args, prompt],
	{ cwd, env: childEnv, stdio: ['ignore', 'pipe', 'pipe'] });
	let stdout = '';
	let stderr = '';
	child.stdout.on('data', (c) => { stdout += c; });
	child.stderr.on('data', (c) => { stderr += c; });
	const done = new Promise((resolve) => child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr })));
	return { child, done };
}
