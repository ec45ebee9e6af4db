"""Group `intents`: intent classification with clarification (seed: "Scaling Intent Understanding").
