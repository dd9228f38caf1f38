'use strict';
/*
 * The package installs the way npm installs things: `npm pack`'s tarball
 * into a fresh project brings koffi along (from the npm cache, else the
 * registry) and the binding loads an installed libasp through the system
 * loader (libasp.so.0; here a directory on LD_LIBRARY_PATH stands for
 * /usr/local/lib or /usr/lib/<multiarch>), without $ASP_LIBRARY and with no
 * build tree next to it, then runs a command against a real sshd. A folder
 * installed with a plain `npm install DIR` is a link without koffi: the
 * binding says how to install it instead of "Cannot find module".
 */

const assert = require('node:assert/strict');
const { execFileSync, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { after, before, describe, it } = require('node:test');

const asp = require('..');
const { startSshd } = require('./sshd-fixture.js');

const PKG = path.resolve(__dirname, '..');
const NPM_FLAGS = ['--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'];

let fx;
let tmp;
let libDir;

before(async () => {
	fx = await startSshd();
	tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'asp-npm-'));
	/* The library this test run loaded, copied under its SONAME where only the loader finds it. */
	libDir = path.join(tmp, 'lib');
	fs.mkdirSync(libDir);
	const built = asp.libraryPath;
	assert.ok(built.includes('/'), `the tests load libasp from a path (${built})`);
	fs.copyFileSync(fs.realpathSync(built), path.join(libDir, 'libasp.so.0'));
});

after(async () => {
	if (fx)
		await fx.stop();
	if (tmp)
		fs.rmSync(tmp, { recursive: true, force: true });
});

function project(name) {
	const dir = path.join(tmp, name);
	fs.mkdirSync(dir);
	fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name, version: '1.0.0', private: true }));
	return dir;
}

function npm(cwd, ...args) {
	execFileSync('npm', [...args, ...NPM_FLAGS], { cwd, stdio: ['ignore', 'pipe', 'inherit'] });
}

/* Run a script in project dir as its own program would: no $ASP_LIBRARY, libasp only via the loader. */
function runIn(dir, script, ...args) {
	const env = { ...process.env, LD_LIBRARY_PATH: libDir };
	delete env.ASP_LIBRARY;
	return spawnSync(process.execPath, ['-e', script, ...args], { cwd: dir, env, encoding: 'utf8' });
}

/* Open the fixture's sandbox (argv[1]), run a command, say where libasp came from. */
const USE = `
const asp = require('libasp');
(async () => {
	const sb = await asp.open({ config: process.argv[1] });
	try {
		const r = await sb.exec('echo installed');
		console.log(JSON.stringify({ lib: asp.libraryPath, at: require.resolve('libasp'), out: r.stdout.toString() }));
	} finally {
		await sb.close();
	}
})().catch((e) => { console.error(e.message); process.exit(1); });
`;

function use(dir) {
	const r = runIn(dir, USE, fx.config);
	assert.equal(r.status, 0, `the program failed: ${r.stderr}`);
	return JSON.parse(r.stdout);
}

describe('npm install', () => {
	it('npm pack, then npm install of the tarball into a fresh project', () => {
		execFileSync('npm', ['pack', '--pack-destination', tmp, PKG, '--loglevel=error'],
			{ stdio: ['ignore', 'pipe', 'inherit'] });
		const tarballs = fs.readdirSync(tmp).filter((f) => /^libasp-.*\.tgz$/.test(f));
		assert.equal(tarballs.length, 1, `npm pack made one tarball: ${tarballs}`);
		const dir = project('from-tarball');
		npm(dir, 'install', path.join(tmp, tarballs[0]));
		assert.ok(fs.existsSync(path.join(dir, 'node_modules', 'koffi', 'package.json')), 'koffi was installed');
		const got = use(dir);
		assert.equal(got.out, 'installed\n');
		assert.equal(got.lib, 'libasp.so.0', 'loaded through the system loader');
		assert.ok(fs.realpathSync(got.at).startsWith(fs.realpathSync(dir)), `a copy in the project: ${got.at}`);
	});

	/* A copy of the package folder without node_modules, as a checkout has before `npm install`. */
	function folder() {
		const src = path.join(tmp, 'folder');
		if (!fs.existsSync(src)) {
			fs.mkdirSync(src);
			const files = JSON.parse(fs.readFileSync(path.join(PKG, 'package.json'), 'utf8')).files;
			for (const f of ['package.json', ...files])
				fs.copyFileSync(path.join(PKG, f), path.join(src, f));
		}
		return src;
	}

	it('npm install --install-links DIR installs koffi with it', () => {
		const dir = project('from-folder');
		npm(dir, 'install', '--install-links', folder());
		const got = use(dir);
		assert.equal(got.out, 'installed\n');
		assert.equal(got.lib, 'libasp.so.0');
	});

	it('a plain npm install DIR (a link, no koffi) says how to install instead', () => {
		const dir = project('linked');
		npm(dir, 'install', folder());
		const r = runIn(dir, "require('libasp')");
		assert.notEqual(r.status, 0, 'require succeeded although koffi is nowhere');
		assert.match(r.stderr, /koffi/);
		assert.match(r.stderr, /--install-links/, r.stderr);
		assert.match(r.stderr, /npm pack/, r.stderr);
	});
});
