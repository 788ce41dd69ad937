"""gan: DCGAN-family image generators trained with manual optimisation inside the zoo's shared trainer."""
