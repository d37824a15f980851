/*
 * config_resolve.c - from what was set to a complete, checked experiment:
 * catalog look-ups for the model and the GPU (explicit keys win over the
 * catalog), derived cluster values, the policy made canonical and checked,
 * and every broken rule reported with the place each key involved was
 * set. Values filled in here record the catalog, the default or what they
 * were derived from as their origin.
 */
#include "config_internal.h"

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
	int kname = config_key_id("model", "name"), ks[8], explicit_ks[8], nexp = 0;
	char what[2 * MSG_MAX], list[MSG_MAX], err[256];
	struct model_shape cat;

	for (int i = 0; dims[i]; i++) {
		ks[i] = config_key_id("model", dims[i]);
		if (config_is_explicit(e, ks[i]))
			explicit_ks[nexp++] = ks[i];
	}
	ks[7] = -1;
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
	char what[2 * MSG_MAX], list[MSG_MAX], where[64];
	struct gpu_spec cat;

	for (const struct hw_field *f = hw_gpu_fields; f->name; f++)
		ks[n++] = config_key_id("cluster", f->name);
	ks[n] = -1;

	if (strcmp(e->gpu_name, CUSTOM) == 0) {
		if (missing_keys(e, ks, list, sizeof list)) {
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

	e->cluster.intra_gbps = e->cluster.gpu.intra_gbps;
	int kinter = config_key_id("cluster", "inter_gbps");
	if (!config_is_explicit(e, kinter)) {
		e->cluster.inter_gbps = e->cluster.gpu.nics_per_node * e->cluster.gpu.nic_gbps /
					e->cluster.gpus_per_node;
		config_origin_set(e, kinter, OR_DERIVED,
			   "cluster.nics_per_node * cluster.nic_gbps / cluster.gpus_per_node");
	}

	if (e->cluster.gpu.nccl_sms > e->cluster.gpu.sms) {
		int knccl = config_key_id("cluster", "nccl_sms"), ksms = config_key_id("cluster", "sms");
		int primary = config_is_explicit(e, ksms) && !config_is_explicit(e, knccl) ? ksms : knccl;
		config_rule_error(e, primary, primary == knccl ? "is more SMs than the GPU has" :
							  "is fewer SMs than one collective holds",
			   (int[]){ primary == knccl ? ksms : knccl, -1 });
		errors++;
	}
	return errors ? -1 : 0;
}

static int resolve_policy(struct experiment *e, int model_ok)
{
	struct policy *p = &e->policy;
	int world = cluster_world(&e->cluster), errors = 0;
	int ksharding = config_key_id("policy", "sharding"), kgroup = config_key_id("policy", "shard_group");
	int knodes = config_key_id("cluster", "nodes"), kgpn = config_key_id("cluster", "gpus_per_node");
	int kaccum = config_key_id("policy", "accum"), kwrap = config_key_id("policy", "wrap");
	int kreshard = config_key_id("policy", "reshard"), klayers = config_key_id("model", "layers");
	int kflat = config_key_id("policy", "flat_params"), kconcat = config_key_id("policy", "concat_last_only");
	int koffload = config_key_id("policy", "offload");
	int kreduce = config_key_id("policy", "reduce_dtype"), kadt = config_key_id("policy", "accum_dtype");
	int kmicro = config_key_id("policy", "microbatches");
	const char *sname = sharding_names[p->sharding];
	char what[MSG_MAX];

	/* gradient dtypes follow the precision unless set */
	enum dtype grad_dt = p->precision == PREC_PURE_BF16 ? DT_BF16 : DT_FP32;
	if (!config_is_explicit(e, kreduce)) {
		p->reduce_dtype = grad_dt;
		config_origin_set(e, kreduce, OR_DERIVED, "policy.precision");
	}
	if (!config_is_explicit(e, kadt)) {
		p->accum_dtype = grad_dt;
		config_origin_set(e, kadt, OR_DERIVED, "policy.precision");
	}

	/* the shard group; an explicit 0 means the default, as if not set */
	if (config_is_explicit(e, kgroup) && p->shard_group == 0)
		config_origin_set(e, kgroup, OR_DEFAULT, NULL);
	int group = p->sharding == SHARD_HSDP ? e->cluster.gpus_per_node :
		    p->sharding == SHARD_DDP ? 1 : world;
	if (config_is_explicit(e, kgroup) && p->sharding != SHARD_HSDP && p->shard_group != group) {
		if (p->sharding == SHARD_DDP)
			snprintf(what, sizeof what, "applies to hsdp only; ddp shards nothing");
		else
			snprintf(what, sizeof what,
				 "applies to hsdp only; %s shards over all %d ranks",
				 sname, world);
		config_rule_error(e, kgroup, what, (int[]){ ksharding, -1 });
		errors++;
	} else if (config_is_explicit(e, kgroup)) {
		if (world % p->shard_group != 0) {
			snprintf(what, sizeof what, "does not divide the world size %d", world);
			config_rule_error(e, kgroup, what, (int[]){ knodes, kgpn, -1 });
			errors++;
		}
	} else {
		char why[64];
		p->shard_group = group;
		snprintf(why, sizeof why, "policy.sharding = %s", sname);
		config_origin_set(e, kgroup, OR_DERIVED, why);
	}

	/*
	 * zero2 and ddp keep full parameters from forward to backward: reshard
	 * resolves to no; "yes", the default's spelling, is taken as the default,
	 * "all-but-last" asks for what they cannot do.
	 */
	if (p->sharding == SHARD_ZERO2 || p->sharding == SHARD_DDP) {
		if (config_is_explicit(e, kreshard) && p->reshard == RESHARD_ALL_BUT_LAST) {
			snprintf(what, sizeof what,
				 "does not apply: %s keeps full parameters from forward to backward",
				 sname);
			config_rule_error(e, kreshard, what, (int[]){ ksharding, -1 });
			errors++;
		} else if (p->reshard != RESHARD_NO || !config_is_explicit(e, kreshard)) {
			p->reshard = RESHARD_NO;
			config_origin_set(e, kreshard, OR_DERIVED, "policy.sharding");
		}
	} else if (!config_is_explicit(e, kreshard)) {
		p->reshard = RESHARD_YES;
		config_origin_set(e, kreshard, OR_DEFAULT, NULL);
	}

	if (p->accum == ACC_DEFER_REPLICA && p->sharding != SHARD_HSDP) {
		config_rule_error(e, kaccum, "needs policy.sharding = hsdp: it defers the all-reduce across replicas",
			   (int[]){ ksharding, -1 });
		errors++;
	}
	if (model_ok && p->accum == ACC_PARTIAL && (p->partial_k < 1 || p->partial_k > e->model.layers)) {
		snprintf(what, sizeof what, "needs K from 1 to the number of layers, %d", e->model.layers);
		config_rule_error(e, kaccum, what, (int[]){ klayers, -1 });
		errors++;
	}
	if (model_ok && p->wrap == WRAP_EVERY && (p->wrap_k < 1 || p->wrap_k > e->model.layers)) {
		snprintf(what, sizeof what, "needs K from 1 to the number of layers, %d", e->model.layers);
		config_rule_error(e, kwrap, what, (int[]){ klayers, -1 });
		errors++;
	}
	if (p->microbatches < 1) {
		config_rule_error(e, kmicro, "must be at least 1", (int[]){ -1 });
		errors++;
	}
	if (p->concat_last_only && !p->flat_params) {
		config_rule_error(e, kconcat, "needs policy.flat_params = true",
			   (int[]){ kflat, -1 });
		errors++;
	}
	if (p->sharding == SHARD_DDP && p->flat_params) {
		config_rule_error(e, kflat, "does not apply to ddp: it has no shards to flatten",
			   (int[]){ ksharding, -1 });
		errors++;
	}
	if (p->sharding == SHARD_DDP && p->offload != OFF_NONE) {
		config_rule_error(e, koffload, "does not apply to ddp: it has no shards to offload",
			   (int[]){ ksharding, -1 });
		errors++;
	}
	return errors ? -1 : 0;
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
	return errors ? -1 : 0;
}
