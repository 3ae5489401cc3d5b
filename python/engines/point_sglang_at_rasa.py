#!/usr/bin/env python3
"""Prints SGLang's unit test of its Mooncake Store HiCache backend with the backend built
as a ``RasaHiCache`` instead.

    python/engines/point_sglang_at_rasa.py test_mooncake_store.py > patched_test.py

SGLang's ``storage/mooncake_store/test_mooncake_store.py`` drives a backend through
``set``/``exists``/``get`` and ``batch_set_v1``/``batch_exists``/``batch_get_v1`` over a
mock host pool of CPU tensors (``get_page_buffer_meta``), for MHA and MLA at several TP
ranks. Its import of ``MooncakeStore`` is replaced by ``RasaHiCache`` (which finds the
session's gateway through ``RASA_ENDPOINT``: conftest.py), and the four configurations its
``__main__`` runs become a pytest fixture. Fails if the file no longer has what it
replaces (a new SGLang version: look again)."""

import sys

text = open(sys.argv[1]).read()
imported = "from sglang.srt.mem_cache.storage.mooncake_store.mooncake_store import MooncakeStore\n"
if imported not in text:
    sys.exit(f"point_sglang_at_rasa: {sys.argv[1]} no longer imports MooncakeStore as expected")
text = text.replace(imported, "from rasa_client.sglang import RasaHiCache as MooncakeStore  # Rasa\n", 1)
for needed in ("def test_single_operation():", "def test_batch_operation(config: HiCacheStorageConfig):",
               "make_hicache_storage_config(is_mla_model=True, tp_rank=3, tp_size=8)"):
    if needed not in text:
        sys.exit(f"point_sglang_at_rasa: {sys.argv[1]} has no {needed!r}")
main = text.index('if __name__ == "__main__":')
text = text[:main] + '''import pytest  # noqa: E402  (the configurations __main__ runs, as a fixture)


@pytest.fixture(params=[(False, 0, 1), (True, 0, 1), (False, 1, 4), (True, 3, 8)],
                ids=["mha-tp0", "mla-tp0", "mha-tp1of4", "mla-tp3of8"])
def config(request):
    mla, rank, size = request.param
    return make_hicache_storage_config(is_mla_model=mla, tp_rank=rank, tp_size=size)


''' + text[main:]
sys.stdout.write(text)
