"""Demo: compile a small transformer MLP block with backend="nvf_bookend" and print explain().

On a GPU with nvFuser the regions run on nvFuser and the report shows their kernels; elsewhere the
same program runs eagerly and the report shows the plan a GPU would get.
"""

import torch
from torch import nn

import dynamo_nvf


class Block(nn.Module):
    def __init__(self, dim: int = 64) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(nn.functional.gelu(self.fc1(self.norm(x))))


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = Block().to(device)
    x = torch.randn(8, 32, 64, device=device)

    compiled = torch.compile(model, backend="nvf_bookend")
    with torch.no_grad():
        out = compiled(x)
        torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-5)
    print(f"compiled output matches eager on {device}: {tuple(out.shape)}")

    print(dynamo_nvf.explain(model, x.requires_grad_(True)))


if __name__ == "__main__":
    main()
