"""examples/caption_folder.ipynb runs top to bottom (nbclient) on the tiny LLaVA fixture.

The notebook runs as a user would, with llamapy's native vision encoder.
"""
from __future__ import annotations

import os
from pathlib import Path

from conftest import needs

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "caption_folder.ipynb"


def test_caption_notebook_executes(tmp_path):
    needs("PIL")
    nbformat = needs("nbformat")
    nbclient = needs("nbclient")
    import llamapy

    nb = nbformat.read(str(NOTEBOOK), as_version=4)
    # The notebook finds the fixtures through LLAMAPY_VLM_DIR (an installed llamapy is not next to tests/).
    os.environ["LLAMAPY_VLM_DIR"] = str(Path(__file__).resolve().parent / "data" / "vlm")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(Path(llamapy.__file__).resolve().parents[1])] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"], outputs
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "Llava15ChatHandler for projector type mlp" in text
    # All seven fixture images decode and are captioned (the WebP one too: Pillow reads it).
    assert "7 of 7 images captioned" in text
    html = [o for o in outputs if o.get("output_type") == "display_data" and "text/html" in o.get("data", {})]
    assert html and html[0]["data"]["text/html"].count("<img") == 7
