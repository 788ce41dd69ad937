"""rl: PPO agents on gymnasium environments, trained inside the zoo's shared Lightning trainer."""
