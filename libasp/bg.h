/*
 * bg.h - background processes (asp_bg_*): commands that outlive the call,
 * the connection and the harness. Above the public API: each operation is
 * one asp_exec of a script from quote.c, and all state lives in the
 * sandbox (quote.h, "Background processes"), none in the handle.
 */
#ifndef ASP_BG_H
#define ASP_BG_H

#include "common.h"

/* An id as asp_bg_start makes them and every call accepts: 1 to 64 of [A-Za-z0-9_-], a letter or digit first. */
int asp__bg_id_ok(const char *id);

#endif
