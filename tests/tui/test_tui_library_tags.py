"""The candidate's verdict view shows the library uses the static stage tagged under the engineering policy."""

from __future__ import annotations

from engine.candidates import Candidate
from engine.integrity.static import check_candidate
from engine.workspace import VerdictNote
from tests.doubles.tui import build_demo_workspace, fake_backend, run_app, screen_text, wait_until

SRC = """#include <torch/extension.h>
#include <cublas_v2.h>
__global__ void bias(float* y, const float* b, int n) { int i = threadIdx.x; if (i < n) y[i] += b[i]; }
torch::Tensor forward(torch::Tensor a, torch::Tensor w, torch::Tensor b) {
    auto y = torch::empty({a.size(0), w.size(0)}, a.options());
    cublasHandle_t h = at::cuda::getCurrentCUDABlasHandle();
    const float one = 1.f, zero = 0.f;
    cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, w.size(0), a.size(0), a.size(1), &one, w.data_ptr<float>(), a.size(1),
                a.data_ptr<float>(), a.size(1), &zero, y.data_ptr<float>(), w.size(0));
    bias<<<1, 256>>>(y.data_ptr<float>(), b.data_ptr<float>(), y.numel());
    return y;
}
"""


def test_verdict_view_lists_tagged_library_uses(tmp_path):
    ws = build_demo_workspace(tmp_path / "ws")
    v = check_candidate(Candidate("robust-kbench", {"kernel.cu": SRC}), None, "engineering")
    assert v.data["libraries"] and v.status.value == "pass"
    ws.record("demo-g1-1", [VerdictNote(v, "2026-01-02T00:00:00+00:00")])
    ws.close()

    async def scenario(app, pilot):
        await pilot.press("enter")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "SessionScreen" and getattr(app.screen, "loaded", False))
        await pilot.press("j", "enter")
        await wait_until(pilot, lambda: getattr(app.screen, "loaded", False))
        await pilot.press("v")
        await pilot.pause()
        text = screen_text(app)
        assert "libraries (engineering policy): cuBLAS x2" in text, text
        assert "cublasSgemm" in text
    run_app(fake_backend(tmp_path / "ws"), scenario)
