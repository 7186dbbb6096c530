"""The replay benches' run caches answer only for the files they were made on."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from replay_common import current_runs, input_digest  # noqa: E402


def test_a_different_pod_list_under_a_cached_name_is_not_answered_from_the_cache(tmp_path):
    (tmp_path / "openb_node_list_gpu_node.csv").write_text("sn,cpu_milli,memory_mib,gpu,model\n")
    pods = tmp_path / "openb_pod_list_default.csv"
    pods.write_text("name,num_gpu\np0,1\n")
    made = input_digest(tmp_path, "default")
    runs = [{"trace": "default", "seed": 42, "digest": made},
            {"trace": "default", "seed": 43}]  # a run from before digests were kept
    assert current_runs(runs, tmp_path) == runs[:1]
    pods.write_text("name,num_gpu\np0,1\np1,2\n")  # another trace of the same name
    assert input_digest(tmp_path, "default") != made and current_runs(runs, tmp_path) == []
    # a generated variant reads its base and the reference list: absent, nothing is dropped
    assert input_digest(tmp_path, "default-spec25") is None
    assert current_runs([{"trace": "default-spec25", "seed": 1}], tmp_path) != []
