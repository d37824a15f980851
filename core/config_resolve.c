/*
 * config_resolve.c - from what was set to a complete, checked experiment:
 * catalog look-ups for the model and the GPU (explicit keys win over the
 * catalog), derived cluster values, the policy made canonical and checked,
 * and every broken rule reported with the place each key involved was
 * set. Values filled in here record the catalog, the default or what they
 * were derived from as their origin.
 */
#include "config_internal.h"

#include "calibration.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include <assert.h>
#include <stddef.h>
#include <string.h>

#define CUSTOM_SEQ 2048 /* model.seq of a custom model that does not set it */

/* "a.b, c.d" of the keys in ks (ending with -1) that are not explicit */
static int missing_keys(const struct experiment *e, const int *ks, char *buf, size_t n)
{
	size_t used = 0;
	int count = 0;

	buf[0] = '\0';
	for (int i = 0; ks[i] >= 0 && used < n; i++)
		if (!config_is_explicit(e, ks[i])) {
			used += (size_t)snprintf(buf + used, n - used, "%s%s.%s", count ? ", " : "",
						 config_key(ks[i])->section, config_key(ks[i])->name);
			count++;
		}
	return count;
}

static int resolve_model(struct experiment *e)
{
	static const char *const dims[] = { "layers", "hidden", "ffn", "heads", "kv_heads", "vocab",
					    "seq", NULL };
	int kname = config_key_id("model", "name"), ktheta = config_key_id("model", "rope_theta");
	int ks[8], explicit_ks[9], nexp = 0;
	char what[2 * MSG_MAX], list[MSG_MAX], err[256];
	struct model_shape cat;

	for (int i = 0; dims[i]; i++) {
		ks[i] = config_key_id("model", dims[i]);
		if (config_is_explicit(e, ks[i]))
			explicit_ks[nexp++] = ks[i];
	}
	ks[7] = -1;
	if (config_is_explicit(e, ktheta))
		explicit_ks[nexp++] = ktheta;
	explicit_ks[nexp] = -1;

	if (strcmp(e->model_name, CUSTOM) == 0) {
		ks[6] = -1; /* seq has a default */
		if (missing_keys(e, ks, list, sizeof list)) {
			snprintf(what, sizeof what, "needs every dimension; not set: %s", list);
			config_rule_error(e, kname, what, (int[]){ -1 });
			return -1;
		}
		ks[6] = config_key_id("model", "seq");
		if (!config_is_explicit(e, ks[6])) {
			e->model.seq = CUSTOM_SEQ;
			config_origin_set(e, ks[6], OR_DEFAULT, NULL);
		}
		if (!config_is_explicit(e, ktheta)) {
			e->model.rope_theta = MODEL_ROPE_THETA_DEFAULT;
			config_origin_set(e, ktheta, OR_DEFAULT, NULL);
		}
	} else {
		if (model_lookup(e->model_name, &cat) < 0) {
			char allowed[768];
			config_allowed_text(config_names_with_custom(model_names()), NULL, e->model_name, allowed,
				     sizeof allowed);
			snprintf(what, sizeof what, "is not a catalog model%s", allowed);
			config_rule_error(e, kname, what, (int[]){ -1 });
			return -1;
		}
		char where[64];
		snprintf(where, sizeof where, "model %s", e->model_name);
		for (int i = 0; dims[i]; i++)
			if (!config_is_explicit(e, ks[i])) {
				*(int *)config_key_field(e, ks[i]) = *(const int *)((const char *)&cat +
					(config_key(ks[i])->offset - offsetof(struct experiment, model)));
				config_origin_set(e, ks[i], OR_CATALOG, where);
			}
		if (!config_is_explicit(e, ktheta)) {
			e->model.rope_theta = cat.rope_theta;
			config_origin_set(e, ktheta, OR_CATALOG, where);
		}
	}
	snprintf(e->model.name, sizeof e->model.name, "%s", e->model_name);
	if (model_check(&e->model, err, sizeof err) < 0) {
		snprintf(what, sizeof what, "has an unusable shape: %s", err);
		config_rule_error(e, kname, what, explicit_ks);
		return -1;
	}
	return 0;
}

static int resolve_cluster(struct experiment *e)
{
	int kgpu = config_key_id("cluster", "gpu"), ks[KEYS_MAX], n = 0, errors = 0;
	int kfwd = config_key_id("cluster", "attn_eff"), kbwd = config_key_id("cluster", "attn_bwd_eff");
	/*
	 * attn_eff alone is this project's attention both ways, as it was
	 * before the backward had a key of its own (experiments and runs
	 * recorded then keep their prices)
	 */
	int bwd_is_fwd = config_is_explicit(e, kfwd) && !config_is_explicit(e, kbwd);
	char what[2 * MSG_MAX], list[MSG_MAX], where[64];
	struct gpu_spec cat;

	for (const struct hw_field *f = hw_gpu_fields; f->name; f++)
		ks[n++] = config_key_id("cluster", f->name);
	ks[n] = -1;

	if (strcmp(e->gpu_name, CUSTOM) == 0) {
		int need[KEYS_MAX], m = 0;
		for (int i = 0; i < n; i++)
			if (!(bwd_is_fwd && ks[i] == kbwd))
				need[m++] = ks[i];
		need[m] = -1;
		if (missing_keys(e, need, list, sizeof list)) {
			snprintf(what, sizeof what, "needs every GPU spec key; not set: %s", list);
			config_rule_error(e, kgpu, what, (int[]){ -1 });
			return -1;
		}
		snprintf(e->cluster.gpu.source, sizeof e->cluster.gpu.source,
			 "custom: the experiment's [cluster] keys");
	} else {
		if (hw_gpu_lookup(e->gpu_name, &cat) < 0) {
			char allowed[768];
			config_allowed_text(config_names_with_custom(hw_gpu_names()), NULL, e->gpu_name, allowed,
				     sizeof allowed);
			snprintf(what, sizeof what, "is not a catalog GPU%s", allowed);
			config_rule_error(e, kgpu, what, (int[]){ -1 });
			return -1;
		}
		snprintf(where, sizeof where, "gpu %s", e->gpu_name);
		int i = 0;
		for (const struct hw_field *f = hw_gpu_fields; f->name; f++, i++) {
			if (config_is_explicit(e, ks[i]))
				continue;
			memcpy((char *)&e->cluster.gpu + f->offset, (const char *)&cat + f->offset,
			       f->type == HW_FIELD_INT ? sizeof(int) : sizeof(double));
			config_origin_set(e, ks[i], OR_CATALOG, where);
		}
		snprintf(e->cluster.gpu.source, sizeof e->cluster.gpu.source, "%s", cat.source);
	}
	snprintf(e->cluster.gpu.name, sizeof e->cluster.gpu.name, "%s", e->gpu_name);
	if (bwd_is_fwd) {
		e->cluster.gpu.attn_bwd_eff = e->cluster.gpu.attn_eff;
		config_origin_set(e, kbwd, OR_DERIVED, "cluster.attn_eff (set alone: both ways)");
	}

	e->cluster.intra_gbps = e->cluster.gpu.intra_gbps;
	int kinter = config_key_id("cluster", "inter_gbps");
	if (!config_is_explicit(e, kinter)) {
		e->cluster.inter_gbps = e->cluster.gpu.nics_per_node * e->cluster.gpu.nic_gbps /
					e->cluster.gpus_per_node;
		config_origin_set(e, kinter, OR_DERIVED,
				  "cluster.nics_per_node * cluster.nic_gbps / cluster.gpus_per_node");
	}

	kinter = config_key_id("cluster", "node_inter_gbps");
	if (!config_is_explicit(e, kinter)) {
		e->cluster.node_inter_gbps = e->cluster.gpu.nics_per_node * e->cluster.gpu.nic_gbps;
		config_origin_set(e, kinter, OR_DERIVED, "cluster.nics_per_node * cluster.nic_gbps");
	}

	if (e->cluster.gpu.nccl_sms > e->cluster.gpu.sms) {
		int knccl = config_key_id("cluster", "nccl_sms"), ksms = config_key_id("cluster", "sms");
		int primary = config_is_explicit(e, ksms) && !config_is_explicit(e, knccl) ? ksms : knccl;
		config_rule_error(e, primary,
				  primary == knccl ? "is more SMs than the GPU has" :
						     "is fewer SMs than one collective holds",
				  (int[]){ primary == knccl ? ksms : knccl, -1 });
		errors++;
	}
	return errors ? -1 : 0;
}

/* The key of a policy field. */
static int policy_key(enum policy_field f)
{
	return config_key_id("policy", policy_field_names[f]);
}

/* The key a violation names as "section.key". */
static int key_named(const char *name)
{
	const char *dot = strchr(name, '.');
	char section[16];

	assert(dot && (size_t)(dot - name) < sizeof section);
	snprintf(section, sizeof section, "%.*s", (int)(dot - name), name);
	return config_key_id(section, dot + 1);
}

/* The origin of field f, which policy_resolve() filled in. */
static void derived_origin(struct experiment *e, enum policy_field f)
{
	int k = policy_key(f);
	char why[64];

	switch (f) {
	case PF_REDUCE_DTYPE:
	case PF_ACCUM_DTYPE:
		config_origin_set(e, k, OR_DERIVED, "policy.precision");
		break;
	case PF_SHARD_GROUP:
		snprintf(why, sizeof why, "policy.sharding = %s", sharding_names[e->policy.sharding]);
		config_origin_set(e, k, OR_DERIVED, why);
		break;
	case PF_RESHARD:
		/* "no" is what the sharding implies (zero2, ddp); "yes" is the default */
		if (e->policy.reshard == RESHARD_NO)
			config_origin_set(e, k, OR_DERIVED, "policy.sharding");
		else
			config_origin_set(e, k, OR_DEFAULT, NULL);
		break;
	default:
		assert(!"policy_resolve() fills in no other field");
	}
}

/*
 * The policy's own rules are policy.c's: this tells policy_resolve() which
 * keys were set in a file or by a flag, records where the values it filled
 * in came from, and reports each violation of policy_check() with the
 * place every key involved was set. Without a usable model shape
 * (model_ok 0), the rules on the layer count are left out.
 */
static int resolve_policy(struct experiment *e, int model_ok)
{
	const struct model_shape *m = model_ok ? &e->model : NULL;
	struct policy_violation v[POLICY_VIOLATIONS_MAX];
	unsigned set = 0, wrote;

	for (int f = 0; f < PF_COUNT; f++)
		if (config_is_explicit(e, policy_key(f)))
			set |= POLICY_BIT(f);
	wrote = policy_resolve(&e->policy, set, &e->cluster, m);
	for (int f = 0; f < PF_COUNT; f++)
		if (wrote & POLICY_BIT(f))
			derived_origin(e, f);

	int n = policy_check(&e->policy, &e->cluster, m, v, POLICY_VIOLATIONS_MAX);
	for (int i = 0; i < n; i++) {
		int others[4], j;
		for (j = 0; v[i].others[j]; j++)
			others[j] = key_named(v[i].others[j]);
		others[j] = -1;
		config_rule_error(e, key_named(v[i].key), v[i].what, others);
	}
	return n ? -1 : 0;
}

int config_gpu_model_from_catalog(struct experiment *e)
{
	if (!strcmp(e->gpu_name, CUSTOM))
		return 0;
	for (const struct hw_field *f = hw_gpu_fields; f->name; f++)
		if (f->model)
			config_origin_set(e, config_key_id("cluster", f->name), OR_DEFAULT, "");
	return config_resolve(e);
}

int config_resolve(struct experiment *e)
{
	int errors = 0;

	assert(e->origins && "config_init() first");
	int model_ok = resolve_model(e) == 0;
	errors += !model_ok;
	errors += resolve_cluster(e) < 0;
	errors += resolve_policy(e, model_ok) < 0;

	int rc = hw_runtime_lookup(runtime_names[e->policy.runtime], &e->runtime);
	assert(rc == 0 && "every runtime name has a catalog entry");
	(void)rc;

	if (e->run.batch < 1) {
		config_rule_error(e, config_key_id("run", "batch"), "must be at least 1", (int[]){ -1 });
		errors++;
	}
	if (!calibration_named(e->calibration)) /* none: the catalog's constants, as with no calibration named */
		e->calibration[0] = '\0';
	if (e->calibration[0] && calibration_access(e->calibration) != 0) {
		char what[CONFIG_PATH_MAX + 64];
		snprintf(what, sizeof what, "cannot be read: %s (make one with gpu_run --calibrate)", strerror(errno));
		config_rule_error(e, config_key_id("cluster", "calibration"), what, (int[]){ -1 });
		errors++;
	}
	return errors ? -1 : 0;
}
