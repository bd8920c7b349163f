"""arxiv-gpt (ARXIV Section 7.5: Figs. 6-8, Table 3) and the --full / --device plumbing of reproduce.

Tiny GPT-2 models only: a trained model is stood in for by a tiny GPT2LMHeadModel with a tiny BPE
tokenizer, both written with save_pretrained into a temporary directory (no hub is reachable).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr

from riemattn import cli
from riemattn.errors import ValidationError
from riemattn.experiments import get
from riemattn.experiments._runner import config_for, config_hash, run_one

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from riemattn.experiments import arxiv_gpt  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _tiny_config(**kw):
    return {**arxiv_gpt.config(quick=True, smoke=True), "passes": 3, "table3_passes": [1, 3], **kw}


@pytest.fixture(scope="module")
def trained_dir(tmp_path_factory):
    """A tiny 'trained' GPT-2 (LM head tied to wte) and a byte-level BPE tokenizer, saved offline."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    path = tmp_path_factory.mktemp("tiny-gpt2")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    text = [arxiv_gpt.CITY_PROMPT, arxiv_gpt.TABLE3_PROMPT, *arxiv_gpt.TABLE2_PROMPTS]
    tok.train_from_iterator(text, trainer)
    fast = transformers.GPT2TokenizerFast(tokenizer_object=tok)
    fast.save_pretrained(path)
    cfg = transformers.GPT2Config(vocab_size=fast.vocab_size, n_positions=512, n_embd=32, n_layer=2, n_head=4)
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(cfg).eval().save_pretrained(path)
    return path


def test_byte_tokens_are_gpt2_byte_ids_and_round_trip():
    bt = arxiv_gpt.ByteTokens()
    # GPT-2's vocabulary: "!" is id 0, " " (\u0120) is 220, "\n" (\u010a) is 198
    assert bt.encode("! \n") == [0, 220, 198]
    assert sorted(arxiv_gpt._byte_order()) == list(range(256))
    for text in (arxiv_gpt.CITY_PROMPT, arxiv_gpt.TABLE3_PROMPT, *arxiv_gpt.TABLE2_PROMPTS):
        ids = bt.encode(text)
        assert max(ids) < 256 and bt.decode(ids) == text
    assert bt.decode([0, 4000, 1]) == '![4000]"'
    assert arxiv_gpt._padded([[5, 6, 7], [8]]).tolist() == [[5, 6, 7], [8, 0, 0]]


def test_prompts_are_the_papers():
    assert arxiv_gpt.CITY_PROMPT.startswith("Describe a futuristic city") and len(arxiv_gpt.TABLE2_PROMPTS) == 5
    assert arxiv_gpt.TABLE2_PROMPTS[4].endswith("within a few years.")
    assert arxiv_gpt.TABLE3_PROMPT.endswith("the meaning of life is...")


def test_random_run_statuses_and_data(tmp_path):
    cfg = _tiny_config(trained=str(tmp_path / "nowhere"))
    ds = arxiv_gpt.run(cfg)
    assert list(ds["variant"].values) == ["random", "random-noff", "redrawn", "redrawn-noff"]
    assert ds["E_city"].shape == (4, 3 * 2 + 1) and ds["E_table2"].shape == (5, 7)
    assert ds["greedy_ids"].shape[0] == 2 and ds.attrs["table3_weights"] == "random (fixed)"
    assert "not found locally" in ds.attrs["trained_missing"]
    assert ds.attrs["tokenizer"].startswith("GPT-2 byte tokens")
    # Table 2 prompts padded with token id 0 on the right, to the longest
    lengths = [len(arxiv_gpt.ByteTokens().encode(p)) for p in arxiv_gpt.TABLE2_PROMPTS]
    t2 = ds["table2_ids"].values
    assert t2.shape[1] == max(lengths) and all((t2[k, n:] == 0).all() for k, n in enumerate(lengths))
    # pass 1 of "redrawn" uses the "random" draw (same E through pass 1), later passes new weights
    E = ds["E_city"]
    np.testing.assert_array_equal(E.sel(variant="random").values[:3], E.sel(variant="redrawn").values[:3])
    assert not np.array_equal(E.sel(variant="random").values[3:], E.sel(variant="redrawn").values[3:])
    claims = arxiv_gpt.claims(ds)
    paper = {k: c for k, c in claims.items() if c["kind"] == "paper"}
    assert all(c["status"] == "not checked at this size" for c in paper.values())
    assert "not found locally" in paper["fig6/trained/toward-consensus"]["reason"]
    assert "GPT-2 XL" in paper["fig6/random/toward-consensus"]["reason"]
    assert {f"fig8/prompt-{k}/toward-consensus" for k in range(1, 6)} <= set(paper)
    e = arxiv_gpt.per_pass(ds, "E_table2")[2]
    assert claims["fig8/prompt-3/decreases"]["status"] == ("reproduced" if e[-1] < e[1] else "not reproduced")
    ds.to_netcdf(tmp_path / "a.nc", engine="scipy")  # NetCDF3-safe (decoded text as ASCII JSON)
    assert arxiv_gpt.plot(ds).axes


def test_trained_weights_found_locally_and_table3_greedy_output(trained_dir):
    ds = arxiv_gpt.run(_tiny_config(trained=str(trained_dir)))
    assert ds.attrs["trained_found"] == 1 and list(ds["variant"].values)[0] == "trained"
    assert str(trained_dir) in ds.attrs["tokenizer"]
    tok = transformers.AutoTokenizer.from_pretrained(trained_dir)
    assert ds["city_ids"].values.tolist() == tok.encode(arxiv_gpt.CITY_PROMPT)
    # pass 1's greedy output = the argmax of the checkpoint's own LM head on the prompt
    model = transformers.GPT2LMHeadModel.from_pretrained(trained_dir).eval()
    ids = torch.tensor([ds["table3_ids"].values.tolist()])
    with torch.no_grad():
        want = model(ids).logits.argmax(-1)[0].numpy()
    np.testing.assert_array_equal(ds["greedy_ids"].sel(decode_pass=1).values, want)
    texts = json.loads(ds.attrs["table3_decoded"])
    assert texts[0] == tok.decode(want.tolist())
    claims = arxiv_gpt.claims(ds)
    assert claims["table3/more-repetitive"]["status"] == "not checked at this size"
    assert "GPT-2 XL" in claims["table3/more-repetitive"]["reason"]
    assert claims["fig6/trained/decreases-each-pass"]["status"] == "not checked at this size"


def _paper_size_ds(city, t2, greedy, trained=True):
    """A dataset shaped like a GPT-2 XL 2000-pass run (48 blocks), E given per pass."""
    L, P = 48, arxiv_gpt.PAPER_PASSES
    layer = np.arange(P * L + 1)

    def per_layer(e):  # e: (..., P + 1) per pass -> (..., layer) constant within each pass
        return np.asarray(e)[..., np.ceil(layer / L).astype(int)]

    variants = (["trained"] if trained else []) + arxiv_gpt._CITY_VARIANTS
    ds = xr.Dataset(
        {"E_city": (("variant", "layer"), per_layer(city)), "E_table2": (("prompt", "layer"), per_layer(t2)),
         "greedy_ids": (("decode_pass", "token_t3"), np.asarray(greedy))},
        coords={"variant": variants, "decode_pass": list(arxiv_gpt.TABLE3_PASSES)},
    )
    ds.attrs.update(n_layer=L, d_model=1600, passes=P, model="gpt2-xl", trained_found=int(trained),
                    trained_missing="" if trained else "trained weights not found locally (x)",
                    table3_weights="trained", table3_decoded=json.dumps(["a"] * 5))
    return ds


def test_claims_are_checked_at_the_papers_size():
    P = arxiv_gpt.PAPER_PASSES
    falling = np.geomspace(1.0, 1e-3, P + 1)
    flat = np.full(P + 1, 0.5)
    city = np.stack([falling, falling, falling, falling, flat])  # trained, random, random-noff, redrawn, -noff
    t2 = np.stack([falling] * 4 + [flat])
    greedy = [np.arange(10), np.r_[np.arange(5), np.arange(5)], np.zeros(10), np.zeros(10), np.zeros(10)]
    c = arxiv_gpt.claims(_paper_size_ds(city, t2, greedy))
    assert c["fig6/trained/toward-consensus"]["status"] == "reproduced"
    assert c["fig6/random/decreases-each-pass"]["status"] == "reproduced"
    assert c["fig7/redrawn-noff/toward-consensus"]["status"] == "not reproduced"
    assert c["fig8/prompt-5/toward-consensus"]["status"] == "not reproduced"
    assert c["fig8/prompt-1/toward-consensus"]["status"] == "reproduced"
    assert c["table3/more-repetitive"]["status"] == "reproduced"
    rising = falling.copy()
    rising[100] = rising[99] * 1.5  # one pass where E rises: "decreases with each pass" is contradicted
    city[1] = rising
    greedy[4] = np.arange(10)  # the last output as varied as the first: not more repetitive
    c = arxiv_gpt.claims(_paper_size_ds(city, t2, greedy))
    assert c["fig6/random/decreases-each-pass"]["status"] == "not reproduced"
    assert c["fig6/random/toward-consensus"]["status"] == "reproduced"
    assert c["table3/more-repetitive"]["status"] == "not reproduced"
    c = arxiv_gpt.claims(_paper_size_ds(city[1:], t2, greedy, trained=False))
    assert c["fig6/trained/toward-consensus"]["status"] == "not checked at this size"
    assert c["table3/more-repetitive"]["status"] == "not checked at this size"


def _small_gpt_ds(e_per_layer, L):
    """icml-gpt's combined data for one model with E given per layer (2 prompts, one variant)."""
    E = np.stack([np.asarray(e_per_layer)] * 2)[None, None]
    n = E.shape[-1]
    return xr.Dataset(
        {"E": (("model", "variant", "prompt", "layer"), E), "E_residual": (("model", "variant", "prompt", "layer"), E),
         "n_layer": ("model", [L]), "passes": ("model", [(n - 1) // L])},
        coords={"model": ["gpt2-small"], "variant": ["random"]})


def test_looped_gpt_deviations_open_the_gate_and_fail_the_claims():
    """With the size gate open (the deviations' unlock), icml-gpt's toward-0 and arxiv-gpt's Figure 6
    claims are decided on small data: E falling to 1 % over 4 passes of 2 blocks is reproduced,
    and each declared deviation (passes in reverse order, first pass repeated) makes it fail."""
    from riemattn.experiments._deviations import claims_at_size, deviated_claims, names_claim

    icml = get("icml-gpt")
    ds = _small_gpt_ds(np.geomspace(1.0, 0.01, 9), L=2)
    assert icml.claims(ds)["gpt2-small/random/toward-0"]["status"] == "not checked at this size"
    for dev in icml.DEVIATIONS:
        assert claims_at_size(icml, ds, dev.unlock)["gpt2-small/random/toward-0"]["status"] == "reproduced"
        assert deviated_claims(icml, dev, ds, {})["gpt2-small/random/toward-0"]["status"] == "not reproduced"
    np.testing.assert_array_equal(icml.passes_reversed_index(3, 10), [0, 7, 8, 9, 4, 5, 6, 1, 2, 3])

    L, P = 2, 4
    layer = np.arange(P * L + 1)
    falling = np.geomspace(1.0, 0.01, P * L + 1)
    city = np.stack([falling] * 4)
    ds = xr.Dataset(
        {"E_city": (("variant", "layer"), city), "E_table2": (("prompt", "layer"), np.stack([falling] * 5)),
         "greedy_ids": (("decode_pass", "token_t3"), np.stack([np.arange(10), np.zeros(10, int)]))},
        coords={"variant": arxiv_gpt._CITY_VARIANTS, "layer": layer, "decode_pass": [1, P]})
    ds.attrs.update(n_layer=L, d_model=32, passes=P, model="gpt2-tiny", trained_found=0,
                    trained_missing="trained weights not found locally (x)", table3_weights="random (fixed)",
                    table3_decoded=json.dumps(["a", "b"]))
    assert arxiv_gpt.claims(ds)["fig6/trained/toward-consensus"]["status"] == "not checked at this size"
    for dev in arxiv_gpt.DEVIATIONS:
        base = claims_at_size(arxiv_gpt, ds, dev.unlock)
        got = deviated_claims(arxiv_gpt, dev, ds, {})
        named = [k for k, c in base.items() if c["kind"] == "paper" and names_claim(dev, k)]
        assert named and all(base[k]["status"] == "reproduced" for k in named), {k: base[k]["status"] for k in named}
        assert all(got[k]["status"] == "not reproduced" for k in named), {k: got[k]["status"] for k in named}


# ------------------------------------------------------------------------------ --full / --device

def test_full_sizes_and_device_in_the_configuration():
    icml, arxiv, fig1 = get("icml-gpt"), get("arxiv-gpt"), get("arxiv-fig1")
    full = config_for(icml, full=True, device="cuda")
    assert full["device"] == "cuda" and (full["prompts"], full["tokens"]) == (100, 200)
    assert [(r["model"], r["size"]) for r in full["runs"]] == [("gpt2", "xl"), ("gpt-neo", "2.7B")]
    assert all(r["variants"] == ["random", "random-noff", "redrawn", "redrawn-noff"] for r in full["runs"])
    assert full["passes"] >= 100
    a = config_for(arxiv, full=True)
    assert (a["size"], a["passes"], a["table3_passes"]) == ("xl", 2000, [1, 5, 10, 100, 1000])
    assert config_for(arxiv, quick=True, full=True)["size"] == "tiny"  # quick wins over full
    # the device is part of an LLM configuration's hash, not of a simulation's
    assert config_hash("icml-gpt", config_for(icml, device="cuda")) != config_hash("icml-gpt", config_for(icml))
    assert config_for(fig1, full=True, device="cuda") == config_for(fig1)


def test_device_is_honoured_and_checked(tmp_path):
    s = run_one("arxiv-gpt", quick=True, out=tmp_path, smoke=True, device="cpu")
    assert s["device"] == "cpu" and s["config"]["device"] == "cpu" and s["verdict"] == "PARTIAL"
    if not torch.cuda.is_available():
        with pytest.raises(ValidationError, match="no CUDA device"):
            run_one("arxiv-gpt", quick=True, out=tmp_path / "cuda", smoke=True, device="cuda")
        assert not (tmp_path / "cuda").exists()


def test_cli_full_and_device_options(tmp_path, capsys):
    assert cli.main(["reproduce", "arxiv-fig1", "--quick", "--full", "--out", str(tmp_path)]) == 2
    assert "--quick or --full" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        cli.main(["reproduce", "arxiv-fig1", "--device", "gpu0", "--out", str(tmp_path)])
    assert exc.value.code == 2 and "--device" in capsys.readouterr().err
    rc = cli.main(["reproduce", "arxiv-fig1", "--quick", "--device", "cuda:0", "--no-progress", "--out",
                   str(tmp_path)])
    out, err = capsys.readouterr()
    if torch.cuda.is_available():  # the simulation integrates on the GPU (riemattn.use_device)
        assert rc == 0 and out.startswith("PASS arxiv-fig1") and "integrate on cuda:0" in err
        assert json.loads((tmp_path / "arxiv-fig1" / "summary.json").read_text())["device"] == "cuda:0"
    else:  # checked before anything runs: a clear error naming --device, nothing written
        assert rc == 2 and "--device='cuda:0': no such CUDA device" in err
        assert not (tmp_path / "arxiv-fig1").exists()
    if not torch.cuda.is_available():  # an LLM figure asked to run on a missing GPU: FAIL, exit 1, clear error
        rc = cli.main(["reproduce", "arxiv-gpt", "--quick", "--device", "cuda", "--no-progress", "--out",
                       str(tmp_path)])
        out = capsys.readouterr().out
        assert rc == 1 and out.startswith("FAIL arxiv-gpt") and "no CUDA device" in out


def test_run_loop_with_given_input_ids():
    from riemattn.llm import run_loop

    ids = np.array([[5, 6, 7, 8], [9, 10, 11, 0]])
    ds = run_loop("gpt2", "tiny", variants=["random"], passes=2, input_ids=ids)
    assert ds["prompt_ids"].values.tolist() == ids.tolist() and ds["E"].shape == (1, 2, 5)
    with pytest.raises(ValidationError, match="input_ids"):
        run_loop("gpt2", "tiny", variants=["random"], passes=1, input_ids=np.array([[1, 5000]]))
    with pytest.raises(ValidationError, match="input_ids"):
        run_loop("gpt2", "tiny", variants=["random"], passes=1, input_ids=np.array([1, 2]))


def test_icml_gpt_runs_where_the_configuration_says():
    from riemattn.experiments import icml_gpt

    cfg = {"seed": 0, "passes": 2, "prompts": 2, "tokens": 5, "threads": 1, "device": "cpu", "dtype": "float64",
           "runs": [{"model": "gpt2", "size": "tiny", "variants": ["random"]},
                    {"model": "gpt-neo", "size": "tiny", "variants": ["redrawn-noff"]}]}
    ds = icml_gpt.run(cfg)
    assert (ds.attrs["device"], ds.attrs["dtype"]) == ("cpu", "float64")
    assert list(ds["model"].values) == ["gpt2-tiny", "gpt-neo-tiny"] and ds["E"].shape == (2, 2, 2, 5)
    if not torch.cuda.is_available():
        with pytest.raises(ValidationError, match="no CUDA device"):
            icml_gpt.run({**cfg, "device": "cuda"})
    with pytest.raises(ValidationError, match="device"):
        icml_gpt.run({**cfg, "device": "tpu:x"})
