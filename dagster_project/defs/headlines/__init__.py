"""Group `headlines`: each paper's headline table with its trained models, scored by that paper's own evaluation.

Downstream of `training` (a trained model is built from the paper group's own exports, so scoring it inside that
group would make the asset graph and the DVC stages cyclic)."""
