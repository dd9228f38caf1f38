/*
 * libasp for Node as an ES module: the same objects as index.js (one copy,
 * loaded through require, so `import` and `require` share one library
 * handle and one koffi configuration).
 *
 *   import { open } from 'libasp';     // or: import asp from 'libasp'
 *
 * libraryPath and codes are getters in index.js that load the library on
 * first use; an ES module cannot export a getter, so they are read here, at
 * import. When the library cannot be loaded they are undefined, and open(),
 * load() and the rest throw the loader's message as they do under require.
 *
 * Copyright (c) 2026 The libasp authors. MIT licence, see LICENSE.
 */
import { createRequire } from 'node:module';

const asp = createRequire(import.meta.url)('./index.js');

export default asp;
export const { open, findConfig, readConfig, checkConfig, AspError, Sandbox, Process, READ_ALL, version, load } = asp;

function loaded(get) {
	try {
		return get();
	} catch {
		return undefined;
	}
}

export const libraryPath = loaded(() => asp.libraryPath);
export const codes = loaded(() => asp.codes);
