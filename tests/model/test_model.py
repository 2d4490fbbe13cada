"""The bigram model: shapes, weight tying, generation stops, config validation."""

from __future__ import annotations

import pytest
import torch

from pipeline.errors import CheckpointError
from pipeline.model.bigram import BigramLM, ModelConfig, generate, padded_vocab_size


def test_logits_shape_and_parameter_count():
    untied = BigramLM(ModelConfig(vocab_size=10, dim=3))
    tied = BigramLM(ModelConfig(vocab_size=10, dim=3, tie_weights=True))
    ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
    assert untied(ids).shape == (2, 3, 10)
    assert tied(ids).shape == (2, 3, 10)
    assert sum(p.numel() for p in untied.parameters()) == 2 * 10 * 3
    assert sum(p.numel() for p in tied.parameters()) == 10 * 3
    assert list(tied.state_dict()) == ["embed.weight"]


def test_training_learns_a_deterministic_bigram():
    torch.manual_seed(0)
    model = BigramLM(ModelConfig(vocab_size=4, dim=8))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    ids = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3]])
    for _ in range(100):
        optimizer.zero_grad()
        loss = model.loss(ids[:, :-1], ids[:, 1:])
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.05
    assert list(generate(model, [0], max_tokens=6, temperature=0)) == [1, 2, 3, 0, 1, 2]


def test_generation_stops_after_a_stop_id_and_is_seeded():
    torch.manual_seed(0)
    model = BigramLM(ModelConfig(vocab_size=50, dim=4))
    greedy = list(generate(model, [3], max_tokens=20, temperature=0))
    stop = greedy[2]
    assert list(generate(model, [3], max_tokens=20, temperature=0, stop_ids={stop})) == greedy[: greedy.index(stop) + 1]

    def sample(seed):
        return list(generate(model, [3], max_tokens=20, generator=torch.Generator().manual_seed(seed)))

    assert sample(1) == sample(1)
    assert len(sample(1)) == 20


def test_generate_needs_a_prompt():
    with pytest.raises(ValueError):
        list(generate(BigramLM(ModelConfig(vocab_size=5, dim=2)), [], max_tokens=3))


@pytest.mark.parametrize(
    "data",
    [{"vocab_size": 5, "dim": 2}, {"vocab_size": 0, "dim": 2, "tie_weights": False},
     {"vocab_size": 5, "dim": "2", "tie_weights": False}, {"vocab_size": 5, "dim": 2, "tie_weights": 1}],
)
def test_model_config_from_dict_refuses_bad_metadata(data):
    with pytest.raises(CheckpointError):
        ModelConfig.from_dict(data)


def test_loss_equals_plain_cross_entropy():
    torch.manual_seed(0)
    model = BigramLM(ModelConfig(vocab_size=30, dim=5))
    ids, targets = torch.randint(0, 30, (4, 9)), torch.randint(0, 30, (4, 9))
    expected = torch.nn.functional.cross_entropy(model(ids).reshape(-1, 30), targets.reshape(-1))
    assert torch.allclose(model.loss(ids, targets), expected, atol=1e-6)


@pytest.mark.parametrize("tie_weights", [False, True])
@pytest.mark.parametrize("vocab_size", [30, 2_000, 70_000])
def test_loss_and_gradients_equal_plain_cross_entropy(vocab_size, tie_weights):
    torch.manual_seed(0)
    model = BigramLM(ModelConfig(vocab_size=vocab_size, dim=6, tie_weights=tie_weights)).double()
    ids, targets = torch.randint(0, vocab_size, (3, 40)), torch.randint(0, vocab_size, (3, 40))
    ids[0, :15], targets[0, :5] = 7, 11  # repeated tokens and repeated (token, target) pairs
    ours = model.loss(ids, targets)
    ours_grads = torch.autograd.grad(ours, list(model.parameters()))
    plain = torch.nn.functional.cross_entropy(model(ids).reshape(-1, vocab_size), targets.reshape(-1))
    plain_grads = torch.autograd.grad(plain, list(model.parameters()))
    assert torch.allclose(ours, plain, rtol=0, atol=1e-12)
    assert all(torch.allclose(a, b, rtol=0, atol=1e-12) for a, b in zip(ours_grads, plain_grads))


def test_the_loss_reuses_one_logits_buffer_from_step_to_step():
    """No new [distinct, vocab] tensor per step: at large vocabularies that meant fresh pages from the kernel."""
    model = BigramLM(ModelConfig(vocab_size=8192, dim=8))
    addresses = set()
    for seed in range(3):
        ids = torch.randint(0, 8192, (32, 65), generator=torch.Generator().manual_seed(seed))
        model.loss(ids[:, :-1], ids[:, 1:]).backward()
        addresses.add(model._buffer.storage.data_ptr())
    assert len(addresses) == 1


def test_a_loss_overwritten_before_its_backward_is_refused():
    model = BigramLM(ModelConfig(vocab_size=50, dim=4))
    ids = torch.randint(0, 50, (2, 9))
    first = model.loss(ids[:, :-1], ids[:, 1:])
    model.loss(ids[:, 1:], ids[:, :-1])
    with pytest.raises(RuntimeError, match="call backward\\(\\) on each loss before computing the next"):
        first.backward()


def fixed_next_token_model(probabilities: list[float]) -> BigramLM:
    """A model whose next-token distribution is ``probabilities`` whatever the current token."""
    model = BigramLM(ModelConfig(vocab_size=len(probabilities), dim=1))
    with torch.no_grad():
        model.embed.weight.fill_(1.0)
        model.head.weight.copy_(torch.tensor(probabilities).log().unsqueeze(1))
    return model


def draws(model: BigramLM, **options) -> set[int]:
    generator = torch.Generator().manual_seed(0)
    return {next(generate(model, [0], max_tokens=1, generator=generator, **options)) for _ in range(400)}


def test_top_k_and_top_p_sample_among_the_most_likely_tokens_only():
    model = fixed_next_token_model([0.05, 0.4, 0.3, 0.15, 0.1])
    assert draws(model) == {0, 1, 2, 3, 4}
    assert draws(model, top_k=2) == {1, 2}
    assert draws(model, top_k=1) == {1} == draws(model, top_p=0.3)
    assert draws(model, top_p=0.75) == {1, 2, 3}  # 0.4 + 0.3 < 0.75: the third token completes the mass
    assert draws(model, top_k=2, top_p=0.9, temperature=5.0) == {1, 2}


def test_sampling_is_seeded_and_never_picks_an_id_beyond_the_tokenizers_vocab():
    model = fixed_next_token_model([0.1, 0.1, 0.4, 0.4])  # IDs 2 and 3: padding rows a tokenizer of 2 never emits
    assert draws(model, vocab_size=2) == {0, 1}
    assert list(generate(model, [0], max_tokens=5, temperature=0, vocab_size=2)) == [0] * 5
    runs = [list(generate(model, [0], max_tokens=30, generator=torch.Generator().manual_seed(7), top_p=0.9))
            for _ in range(2)]
    assert runs[0] == runs[1]


@pytest.mark.parametrize("vocab_size, multiple, padded", [(50_257, 64, 50_304), (2049, 64, 2112), (2048, 64, 2048),
                                                          (300, None, 300), (300, 1, 300)])
def test_the_padded_vocab_is_the_next_multiple(vocab_size, multiple, padded):
    assert padded_vocab_size(vocab_size, multiple) == padded
