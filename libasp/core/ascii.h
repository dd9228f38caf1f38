/*
 * ascii.h - character tests of the text formats libasp parses (pins,
 * known_hosts): ASCII only, whatever the locale (<ctype.h> follows it).
 */
#ifndef ASP_ASCII_H
#define ASP_ASCII_H

/* A blank between the fields of a line: space or tab. */
static inline int asp__ascii_blank(char c)
{
	return c == ' ' || c == '\t';
}

static inline char asp__ascii_lower(char c)
{
	return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
}

#endif
