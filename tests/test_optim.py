import pytest
import torch

from pgrpo.optim import OptimConfig, RawSecondMomentAdamW, build_optimizer


def orthonormal_rows(k: int, r: int, seed: int) -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(r, k, generator=torch.Generator().manual_seed(seed)))
    return q.T


def test_without_a_kept_raw_gradient_it_steps_as_torch_adamw():
    a, b = torch.zeros(8, requires_grad=True), torch.zeros(8, requires_grad=True)
    ours = RawSecondMomentAdamW([a], lr=0.1, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.01)
    theirs = torch.optim.AdamW([b], lr=0.1, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.01)
    noise = torch.Generator().manual_seed(0)
    for _ in range(20):
        g = torch.randn(8, generator=noise)
        a.grad, b.grad = g.clone(), g.clone()
        ours.step()
        theirs.step()
    torch.testing.assert_close(a, b)


def test_a_raw_second_moment_does_not_inflate_the_step_a_projection_keeps():
    # remove span(V) (k = 16 of r = 32) from noise gradients: plain AdamW's second moment shrinks with the
    # gradient and its step along what is left grows back to full size; a raw second moment keeps the step
    # the unedited gradient would have had along those directions
    V = orthonormal_rows(16, 32, seed=1)
    steps = {}
    for second_moment in ("projected", "raw"):
        knob = torch.zeros(32, requires_grad=True)
        opt = build_optimizer([knob], [], OptimConfig(lr=1e-2, second_moment=second_moment))
        noise, moved = torch.Generator().manual_seed(2), []
        for _ in range(100):
            raw = torch.randn(32, generator=noise)
            knob.grad = raw.clone()
            if second_moment == "raw":
                opt.keep_raw_grads()
            knob.grad -= V.T @ (V @ raw)
            before = knob.detach().clone()
            opt.step()
            moved.append((knob.detach() - before).norm())
        steps[second_moment] = torch.stack(moved[20:]).mean()
    assert steps["projected"] > 1.2 * steps["raw"]


def test_sgd_and_unknown_settings():
    knob = torch.zeros(4, requires_grad=True)
    assert isinstance(build_optimizer([knob], [], OptimConfig(name="sgd", momentum=0.5)), torch.optim.SGD)
    with pytest.raises(ValueError, match="SGD has no second moment"):
        OptimConfig(name="sgd", second_moment="raw")
    with pytest.raises(ValueError, match="'adamw' or 'sgd', got 'adam'"):
        OptimConfig(name="adam")
