"""What domains import from the zoo: optimizer groups, TensorBoard helpers, pretrained-weight transfer, deploy
types, and the task-hook contract with its one lookup."""
