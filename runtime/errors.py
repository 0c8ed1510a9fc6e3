"""Errors raised by cubinforge.runtime.

One hierarchy, so a caller can catch everything the runtime raises with
``CubinforgeError`` while the standard bases (ValueError, LookupError, RuntimeError)
keep the usual ``except`` clauses working.
"""

from __future__ import annotations


class CubinforgeError(Exception):
    """Base of every error the runtime raises."""


class ContractError(CubinforgeError):
    """A launch contract or manifest is malformed or inconsistent (a generator bug)."""


class InputError(CubinforgeError, ValueError):
    """The caller's arrays or scalars do not satisfy what the variant accepts."""


class VariantNotFound(CubinforgeError, LookupError):
    """No variant in the registry matches what was asked; nothing is substituted."""


class UnverifiedVariant(CubinforgeError, RuntimeError):
    """The variant has never been checked numerically on a GPU of its arch; launching it needs
    an explicit opt-in (CUBINFORGE_ALLOW_UNVERIFIED=1 or allow_unverified=True)."""


class IntegrityError(CubinforgeError):
    """A registry blob does not hash to the sha256 its manifest names."""


class DriverUnavailable(CubinforgeError, RuntimeError):
    """cuda-bindings or the CUDA driver itself cannot be loaded."""


class CudaError(CubinforgeError, RuntimeError):
    """A CUDA driver call failed; ``name`` is the driver's CUresult name."""

    def __init__(self, call: str, code: int, name: str, detail: str = ""):
        self.call = call
        self.code = code
        self.name = name
        msg = f"{call} failed: {name} ({code})"
        if detail:
            msg += f": {detail}"
        super().__init__(msg)
