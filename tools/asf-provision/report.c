/*
 * report.c - the report of a teardown: one entry per object, shared by
 * manage.c (`down`, up's rollback) and kube.c (the Kubernetes objects), so
 * that neither calls into the other for it.
 */
#include "asf.h"

void asf_note(cJSON *report, const char *object, const char *name, const char *result,
	      const char *detail)
{
	cJSON *r;

	if (!report)
		return;
	r = cJSON_CreateObject();
	cJSON_AddStringToObject(r, "object", object);
	cJSON_AddStringToObject(r, "name", name);
	cJSON_AddStringToObject(r, "result", result);
	if (detail && *detail)
		cJSON_AddStringToObject(r, "detail", detail);
	cJSON_AddItemToArray(report, r);
}
