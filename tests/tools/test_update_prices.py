"""tools/update_prices.py reads Karpenter's generated price table: one region's map, its date, and the notes a
maintainer wrote kept while the price stands."""

from __future__ import annotations

import pytest

from llm_serving.gpu import known_instance_type_names
from tools import update_prices

# The generated file's layout (aws/karpenter-provider-aws pkg/providers/pricing/zz_generated.pricing_aws.go):
# a header line, then per region a map of family comments and `"type": price,` pairs.
GO = '''package pricing

// generated at 2026-07-20T13:44:30Z for us-east-1

var InitialOnDemandPricesAWS = map[string]map[ec2types.InstanceType]float64{
\t// us-east-1
\t"us-east-1": {
\t\t// g6 family
\t\t"g6.48xlarge": 13.350400, "g6.xlarge": 0.804800,
\t\t// p5 family
\t\t"p5.48xlarge": 55.040000,
\t},
\t"eu-west-1": {
\t\t"g6.xlarge": 0.900000,
\t},
}
'''
COMMIT = "6fc13b5236fd04fd16ff3f9dc7490d0813994099"


def test_one_regions_prices_and_the_snapshots_date_are_read():
    generated_at, prices = update_prices.parse(GO)
    assert generated_at == "2026-07-20T13:44:30Z"
    assert prices == {"g6.48xlarge": 13.3504, "g6.xlarge": 0.8048, "p5.48xlarge": 55.04}


def test_every_catalog_type_gets_a_price_or_null_with_a_note_and_editorial_notes_stay_with_their_price():
    previous = {"p5.48xlarge": {"usd_per_hour": 55.04, "price_cut_note": "cut in June 2025"},
                "g6.xlarge": {"usd_per_hour": 0.7, "note": "an older price's note"}}
    found = update_prices.derive(GO, COMMIT, previous)
    assert set(found) == set(known_instance_type_names())
    assert found["p5.48xlarge"]["price_cut_note"] == "cut in June 2025"
    assert found["g6.xlarge"]["usd_per_hour"] == 0.8048 and "note" not in found["g6.xlarge"]
    assert found["p5e.48xlarge"]["usd_per_hour"] is None and found["p5e.48xlarge"]["note"]
    assert all(COMMIT in entry["source"] and entry["date"] == "2026-07-20" for entry in found.values())


def test_a_file_that_is_not_the_table_is_refused():
    with pytest.raises(update_prices.TableError, match="generated at"):
        update_prices.parse("package pricing\n")
    with pytest.raises(update_prices.TableError, match="no prices for us-east-1"):
        update_prices.parse(GO.replace('"us-east-1": {', '"us-west-2": {'))
