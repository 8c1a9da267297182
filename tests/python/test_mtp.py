"""Multi-token-prediction heads (``models/mtp.py``) and MTP speculation
(``runner/mtp_drafter.py``) on random Qwen3.5 / Qwen3-Next twins with ``mtp.*`` tensors
(``tiny_hybrid.MTP_TWINS``): the head's step against the formula of vLLM's
``qwen3_next_mtp.py`` / ``qwen3_5_mtp.py`` in torch (transformers' decoder layer for the
layer), its drafts against the head run by hand, greedy output equal to plain decoding
(CPU and the simulated device, single and batched, drafts accepted and rejected), the
head of a GGUF file's nextn block equal to its Hugging Face checkpoint's, and bad input
refused."""
import copy
import json
import shutil

import numpy as np
import pytest

import metalrt
import tiny_hybrid
from conftest import DEVICES, assert_matches
from metalrt.cache import ScheduledChunk, build_step
from metalrt.loaders.huggingface import read_safetensors
from metalrt.runner import Engine, SamplingParams
from metalrt.runner.speculative import SpeculativeConfig
from test_speculative import run

PROMPTS = [tiny_hybrid.prompt(n, n) for n in (9, 20, 4)]


def mtp_tensors(directory):
    return {k: np.array(v[0], np.float32) for k, v in
            read_safetensors(str(directory / "model.safetensors")).items() if k.startswith("mtp.")}


def reference_head(name, ids, hidden):
    """float32 (out, logits) [T, H], [T, V] of the MTP head of twin ``name`` at positions
    0 .. T - 1, token ids[p] (the token after p) and the target's hidden ``hidden[p]``:
    vLLM's formula in torch, the layer transformers' full-attention decoder layer of the
    target's kind loaded with ``mtp.layers.0.*``."""
    import torch

    ref = tiny_hybrid.reference(name)
    mtp = {k: torch.from_numpy(v) for k, v in mtp_tensors(tiny_hybrid.path(name)).items()}
    full = next(i for i, t in enumerate(ref.config.layer_types) if t == "full_attention")
    layer = copy.deepcopy(ref.model.layers[full])
    layer.load_state_dict({k[len("mtp.layers.0."):]: v for k, v in mtp.items()
                           if k.startswith("mtp.layers.0.")})
    eps = ref.config.rms_norm_eps

    def norm(x, key):   # the zero-centred RMSNorm of these families
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1 + mtp[key])

    with torch.no_grad():
        ids = torch.tensor(ids)
        e = ref.model.embed_tokens(ids)
        x = torch.cat([norm(e, "mtp.pre_fc_norm_embedding.weight"),
                       norm(torch.from_numpy(hidden), "mtp.pre_fc_norm_hidden.weight")],
                      -1) @ mtp["mtp.fc.weight"].T
        t = len(ids)
        positions = torch.arange(t)[None]
        mask = torch.full((t, t), float("-inf")).triu(1)[None, None]
        y = layer(x[None], position_embeddings=ref.model.rotary_emb(x[None], positions),
                  attention_mask=mask, position_ids=positions)
        y = y[0] if isinstance(y, tuple) else y
        out = norm(y[0], "mtp.norm.weight")
        return out.numpy(), ref.lm_head(out).numpy()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["qwen3_5_mtp", "qwen3_next_mtp"])
def test_mtp_head_step_matches_the_formula(name, device):
    """A prefill of 12 positions, then a 1-token step reading the head's KV cache;
    the Qwen3-Next twin's layer is a sparse MoE block, the Qwen3.5 twin's a dense MLP."""
    model = metalrt.load(str(tiny_hybrid.path(name)), device=device)[0]
    head = model.mtp
    ids = tiny_hybrid.prompt(13, 3)
    hidden = np.random.default_rng(4).standard_normal((13, 64)).astype(np.float32)
    out_ref, logits_ref = reference_head(name, ids, hidden)
    cache = head.new_cache(1)
    rows = []
    for start, n in ((0, 12), (12, 1)):
        step = build_step([ScheduledChunk(ids[start:start + n], start, [0], "all")], device)
        out, logits = head.forward(step, metalrt.asarray(hidden[start:start + n], device=device),
                                   cache)
        rows.append((out.numpy(), logits.numpy()))
    out = np.concatenate([o for o, _ in rows])
    logits = np.concatenate([lg for _, lg in rows])
    assert_matches(out, out_ref, "float32", worst_bar=1e-4)
    assert_matches(logits, logits_ref, "float32", worst_bar=1e-4)
    # The last position read the first twelve from the cache: without them it differs.
    alone = head.forward(build_step([ScheduledChunk(ids[12:], 0, [0], "all")], device),
                         metalrt.asarray(hidden[12:], device=device), head.new_cache(1))[1]
    assert np.abs(alone.numpy() - logits_ref[12:]).max() > 1e-3


def test_drafts_are_the_heads_greedy_continuation():
    """The first round after a prompt: the catch-up reads the target's final-normed
    hidden state at every prompt position with the token after it (the sampled token
    after the last), then the head's own output with its draft."""
    model = metalrt.load(str(tiny_hybrid.path("qwen3_5_mtp")), device="cpu")[0]
    prompt = PROMPTS[1]
    engine = Engine(model, model.new_cache(4), speculative=SpeculativeConfig("mtp", 3))
    request = engine.add_request(prompt, SamplingParams(), 8)
    engine.step()                                   # the prefill and the first token
    drafts = engine.drafter.propose([(request, 3)])[0]
    engine.close()

    cache = model.new_cache(4)
    logits, hidden = model.forward(build_step([ScheduledChunk(prompt, 0, [0, 1, 2, 3], "last")],
                                              "cpu"), cache, final_hidden=True)
    first = int(np.argmax(logits.numpy()[0]))
    assert request.output == [first]
    head, kv = model.mtp, model.mtp.new_cache(4)
    tokens, state, position, expected = prompt[1:] + [first], hidden, 0, []
    for _ in range(3):
        step = build_step([ScheduledChunk(tokens, position, [0, 1, 2, 3], "last")], "cpu")
        state, draft_logits = head.forward(step, state, kv)
        position += len(tokens)
        tokens = [int(np.argmax(draft_logits.numpy()[0]))]
        expected.append(tokens[0])
    assert drafts == expected


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["qwen3_5_mtp", "qwen3_next_mtp"])
def test_mtp_greedy_output_equals_plain_decoding(name, device):
    """Single and batched (request 1 decodes plainly in the same steps); on the CPU
    also chunked prefill (8-token steps: the catch-up spans chunks) without decode
    plans. The Qwen3.5 twin's head predicts its target well (most drafts accepted, some
    rejected); the Qwen3-Next twin's is random (drafts rejected: state re-runs)."""
    model = metalrt.load(str(tiny_hybrid.path(name)), device=device)[0]
    plain, _ = run(model, PROMPTS)
    cases = [(1, True, 512, PROMPTS[:1]), (3, True, 512, PROMPTS)]
    if device == "cpu":
        cases.append((2, False, 8, PROMPTS))
    for k, plans, budget, prompts in cases:
        got, stats = run(model, prompts, SpeculativeConfig("mtp", k), plans=plans,
                         max_batched_tokens=budget, speculating=lambda i: i != 1)
        assert got == plain[:len(prompts)], (k, plans, budget)
        assert stats.verify_steps > 0 and stats.state_reruns > 0
        assert stats.accepted_tokens < stats.draft_tokens
        if name == "qwen3_5_mtp":
            assert stats.accepted_tokens > 0


@pytest.mark.parametrize("device", DEVICES)
def test_mtp_steps_replay_decode_plans(device):
    """With MTP, every target step after the prefill is a plan's (recorded or replayed):
    the verify and decode plans hand out the final-normed hidden states the head reads
    (``DecodePlans.launch(outputs="hidden")``), and every proposal round after the
    first (the prompt's catch-up) is a round plan's (``MtpDrafter``), and so is the
    re-run of the kept tokens over the restored state after a rejection (outputs
    "none"); the output is plain decoding's. Batched, a step in which the requests verify different numbers
    of drafts (near max_tokens) runs op by op, and so does the next round; the others
    replay. Both twins: a dense-MLP head (Qwen3.5) and a sparse-MoE one (Qwen3-Next)."""
    for name in ("qwen3_5_mtp", "qwen3_next_mtp"):
        model = metalrt.load(str(tiny_hybrid.path(name)), device=device)[0]
        plain, _ = run(model, PROMPTS, max_tokens=16)
        for prompts in (PROMPTS[1:2], PROMPTS[::2]):
            got, stats = run(model, prompts, SpeculativeConfig("mtp", 3), max_tokens=16)
            assert got == [plain[PROMPTS.index(p)] for p in prompts]
            assert stats.verify_steps > 0 and stats.accepted_tokens < stats.draft_tokens
            assert stats.plan_replays > 0 and stats.state_reruns > 0
            assert stats.draft_plan_replays > 0
            op_by_op = stats.steps - stats.plan_records - stats.plan_replays
            rounds = stats.draft_plan_records + stats.draft_plan_replays
            if len(prompts) == 1:
                # Every re-run of the kept tokens after a rejection is a plan's too.
                assert op_by_op == 1 and rounds == stats.verify_steps - 1, stats
                assert stats.rerun_plan_records + stats.rerun_plan_replays == \
                    stats.state_reruns, stats
            else:
                # The rounds after op-by-op steps, and before the last step (nothing
                # drafted: at max_tokens), run op by op.
                assert 1 <= op_by_op <= 3 and rounds >= stats.steps - 2 * op_by_op - 1, stats


def test_mtp_with_the_hybrid_prefix_cache_equals_plain_decoding():
    """A second request sharing a 40-token prefix resumes from a state checkpoint and
    prefills only the rest; the head's rows of the cached prefix are those the first
    request wrote. Both outputs equal plain decoding's."""
    model = metalrt.load(str(tiny_hybrid.path("qwen3_5_mtp")), device="cpu")[0]
    shared = tiny_hybrid.prompt(40, 7)
    prompts = [shared + tiny_hybrid.prompt(5, 8), shared + tiny_hybrid.prompt(9, 9)]
    plain = [run(model, [p])[0][0] for p in prompts]
    engine = Engine(model, model.new_cache(16), 16, prefix_caching=True,
                    speculative=SpeculativeConfig("mtp", 2))
    outputs = []
    for p in prompts:
        request = engine.add_request(p, SamplingParams(), 24)
        while engine.has_work:
            engine.step()
        outputs.append(request.output)
    stats = engine.stats
    engine.close()
    assert outputs == plain
    assert stats.prompt_tokens_cached >= 32 and stats.accepted_tokens > 0


def test_mtp_beside_a_long_prompt_chunk_equals_plain_decoding():
    """A 40-token prompt arriving while another request decodes with MTP: the step runs
    the decode rows and the prompt chunk in two forward passes (``decode_row_passes``)
    and hands the head both passes' hidden states; both outputs equal plain decoding."""
    model = metalrt.load(str(tiny_hybrid.path("qwen3_5_mtp")), device="cpu")[0]
    prompts = [PROMPTS[0], tiny_hybrid.prompt(40, 11)]
    plain = [run(model, [p])[0][0] for p in prompts]
    engine = Engine(model, model.new_cache(16), speculative=SpeculativeConfig("mtp", 3))
    try:
        first = engine.add_request(prompts[0], SamplingParams(), 24)
        engine.step()
        engine.step()
        second = engine.add_request(prompts[1], SamplingParams(), 24)
        while engine.has_work:
            engine.step()
        assert engine.stats.verify_steps > 0
    finally:
        engine.close()
    assert [first.output, second.output] == plain


def test_gguf_nextn_head_equals_the_hugging_face_head():
    """llama.cpp's converter writes the twin's ``mtp.*`` as a nextn block (blk.4.*,
    ``nextn_predict_layers``); read back, its head computes what the checkpoint's does,
    and MTP speculation on the GGUF file decodes as plain decoding."""
    import moe_gguf_fixtures

    files = moe_gguf_fixtures.mtp_fixture()
    hf = metalrt.load(str(files["hf"]), device="cpu")[0]
    gguf = metalrt.load(str(files["f32"]), device="cpu")[0]
    assert gguf.num_layers == hf.num_layers == 4 and gguf.mtp is not None
    ids = list(range(100, 111))
    hidden = np.random.default_rng(5).standard_normal((11, 64)).astype(np.float32)
    outs = []
    for model in (hf, gguf):
        step = build_step([ScheduledChunk(ids, 0, [0], "all")], "cpu")
        outs.append([t.numpy() for t in model.mtp.forward(step, metalrt.asarray(hidden),
                                                           model.mtp.new_cache(1))])
    for got, want in zip(outs[1], outs[0]):
        assert_matches(got, want, "float32", worst_bar=1e-5)
    prompts = [[int(t) for t in np.random.default_rng(s).integers(0, 49152, n)]
               for s, n in ((1, 10), (2, 17))]
    plain, _ = run(gguf, prompts, max_tokens=12)
    got, stats = run(gguf, prompts, SpeculativeConfig("mtp", 2), max_tokens=12)
    assert got == plain and stats.verify_steps > 0


def test_bad_mtp_settings_are_refused(tmp_path):
    plain = metalrt.load(str(tiny_hybrid.path("qwen3_5")), device="cpu")[0]
    assert plain.mtp is None
    with pytest.raises(ValueError, match=r"^\[speculative\] 'mtp' needs a multi-token-prediction "
                                         r"head; this qwen3_5 model has none \(no mtp\.\* tensors\)"):
        Engine(plain, plain.new_cache(4), speculative=SpeculativeConfig("mtp", 2))
    twin = tmp_path / "two-layers"
    shutil.copytree(tiny_hybrid.path("qwen3_5_mtp"), twin)
    config = json.loads((twin / "config.json").read_text())
    (twin / "config.json").write_text(json.dumps(dict(config, mtp_num_hidden_layers=2)))
    model = metalrt.load(str(twin), device="cpu")[0]
    with pytest.raises(ValueError, match=r"^\[qwen3_5\] config 'mtp_num_hidden_layers' is 2; "
                                         r"metalrt runs an MTP head of 1 layer"):
        Engine(model, model.new_cache(4), speculative=SpeculativeConfig("mtp", 2))
    model = metalrt.load(str(tiny_hybrid.path("qwen3_5_mtp")), device="cpu")[0]
    with pytest.raises(ValueError, match=r"above the KV cache's room: it holds 64 tokens"):
        Engine(model, model.new_cache(4), speculative=SpeculativeConfig("mtp", 64))
    with pytest.raises(ValueError, match=r"^\[speculative\] num_draft_tokens must be >= 1, got 0"):
        SpeculativeConfig("mtp", 0)


def test_generate_and_the_cli_speculate_with_mtp(capsys):
    from metalrt import cli

    path = str(tiny_hybrid.path("qwen3_5_mtp"))
    model, tokenizer = metalrt.load(path, device="cpu")
    prompt = PROMPTS[1]
    plain = metalrt.generate(model, tokenizer, prompt, max_tokens=16)
    assert metalrt.generate(model, tokenizer, prompt, max_tokens=16, spec_type="mtp",
                            num_draft_tokens=3) == plain
    assert metalrt.batch_generate(model, tokenizer, PROMPTS, max_tokens=16, spec_type="mtp") == \
        metalrt.batch_generate(model, tokenizer, PROMPTS, max_tokens=16)
    base = ["generate", "--model", path, "--prompt", tokenizer.decode(prompt), "--max-tokens",
            "16", "--device", "cpu"]
    assert cli.main(base) == 0
    plain_out = capsys.readouterr().out.split("Prompt:")[0]
    assert cli.main(base + ["--spec-type", "mtp", "--num-draft-tokens", "2"]) == 0
    assert capsys.readouterr().out.split("Prompt:")[0] == plain_out
    assert cli.main(base + ["--spec-type", "mtp", "--num-draft-tokens", "0"]) == 1
    assert "num_draft_tokens must be >= 1, got 0" in capsys.readouterr().err
