"""isolation: deployments that could misread each other's bytes never see each other's pages."""

from __future__ import annotations

from typing import Any

import pytest

from ..checks import check_equal
from ..harness import Handle, Harness
from ..pages import PoolSpec

#: (id, pool changes, config changes) of the writer's twin that must NOT see the writer's pages.
#: The writer runs on tp 0 of 2, pp 0 of 2, cp 0 of 2, MHA page_first bfloat16, page size 4.
VARIANTS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("model", {}, {"model_name": "OTHER"}),
    ("dtype", {"dtype": "float16"}, {}),
    ("layout", {"layout": "page_first_direct"}, {}),
    ("page_size", {"page_size": 8, "num_pages": 32}, {}),
    ("tp_rank", {}, {"tp_rank": 1}),
    ("tp_size", {}, {"tp_size": 4}),
    ("pp_rank", {}, {"pp_rank": 1}),
    ("cp_rank", {}, {"cp_rank": 1}),
    ("namespace", {}, {"namespace": "OTHER"}),
]
BASE: dict[str, Any] = {"tp_rank": 0, "tp_size": 2, "pp_rank": 0, "pp_size": 2, "cp_rank": 0, "cp_size": 2}


def _shared_or_skip(harness: Harness, writer: Handle, key: str) -> None:
    twin = harness.open(writer.spec, config=writer.config)
    if twin.fetch([key]) != [writer.content(key)]:
        harness.skip_unshared()


class IsolationTests:
    """Key spaces are disjoint unless every rank holds the same KV (MLA)."""

    category = "isolation"

    @pytest.mark.parametrize("variant", [v[0] for v in VARIANTS])
    def test_isolation_configs_do_not_share(self, harness: Harness, variant: str) -> None:
        """A deployment differing in one of model, dtype, layout, page size, ranks or namespace sees none of
        another's pages (storage keys differ)."""
        _, pool_changes, config_changes = next(v for v in VARIANTS if v[0] == variant)
        if variant == "namespace":
            harness.require_sdk("the namespace option")
        writer = harness.open(PoolSpec(), **BASE)
        key = harness.key()
        writer.store([key], 0, "the writer storing a page")
        _shared_or_skip(harness, writer, key)
        fields = {**BASE, **config_changes}
        extra = None
        if "namespace" in fields:
            extra = {"namespace": f"{harness.namespace}-other"}
            fields.pop("namespace")
        if fields.get("model_name") == "OTHER":
            fields["model_name"] = f"{harness.model}-other"
        reader = harness.open(PoolSpec().with_(**pool_changes), config=harness.config(extra=extra, **fields))
        what = f"a deployment differing only in {variant}"
        rule = "isolation: deployments that could misread each other's bytes never share a storage key"
        check_equal(reader.exists_each([key]), [False], f"{what}: exists of the writer's page", rule=rule)
        reader.expect([key], [None], f"{what}: reading the writer's page", rule=rule)
        if harness.sdk:
            check_equal(reader.exists_prefix([key]), 0, f"{what}: batch_exists of the writer's page", rule=rule)

    def test_isolation_mla_ranks_share(self, harness: Harness) -> None:
        """With is_mla_model=True every tp rank holds the same KV: rank 1 reads rank 0's pages."""
        spec = PoolSpec(is_mla=True)
        writer = harness.open(spec, tp_rank=0, tp_size=2, is_mla_model=True)
        key = harness.key()
        writer.store([key], 9, "tp rank 0 of an MLA model storing a page")
        _twin = harness.open(spec, config=writer.config)
        if _twin.fetch([key]) != [writer.content(key, 9)]:
            harness.skip_unshared()
        reader = harness.open(spec, tp_rank=1, tp_size=2, is_mla_model=True)
        reader.expect([key], 9, "tp rank 1 of the MLA model reading rank 0's page")
