"""central's one role: the trusted curator, with the whole training data and the model."""

from __future__ import annotations

from data.types import RecDataset
from models.central import build_trainer
from nodes.node import Node, NodeContext, expect_kinds


class Curator(Node):
    """Trains its model one epoch per ``train`` phase and reports the trainer's figures; reports
    the test metrics at ``eval``. The trainer is seeded with the run's seed."""

    role = "curator"
    ACCEPTS = {}  # no message ever arrives: there is no one else

    def __init__(self, nid: str, ctx: NodeContext, dataset: RecDataset):
        super().__init__(nid, ctx)
        c = self.config
        self.trainer = build_trainer(
            dataset,
            c.model,
            dim=c.dim,
            layers=c.layers,
            lr=c.lr,
            l2=c.l2,
            batch_size=c.batch_size,
            eval_k=c.eval_k,
            seed=ctx.seed,
            device=self.device,
            **c.trainer_options(),
        )

    def handle(self, phase: str, inbox) -> None:
        expect_kinds(inbox, node=self.id)  # no message ever arrives: there is no one else
        if phase == "train":
            figures = self.trainer.train_epoch()
        elif phase == "eval":
            figures = self.trainer.evaluate()
        else:
            super().handle(phase, inbox)
            return
        for name, value in figures.items():
            self.report(name, value)
