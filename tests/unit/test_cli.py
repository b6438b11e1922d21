import asyncio
import os
import signal

import pytest

from indexer.cli import _stoppable


def test_sigterm_cancels_a_command_as_ctrl_c_does() -> None:
    cleaned = []

    async def command() -> None:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.sleep(10)
        finally:
            cleaned.append(True)  # the command's own clean-up runs

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(_stoppable(command()))
    assert cleaned == [True]
    # The handler is gone with the command.
    assert signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None)


def test_a_finished_command_returns_its_value() -> None:
    async def command() -> int:
        return 7

    assert asyncio.run(_stoppable(command())) == 7
