package org.tpurt;

/** Status code 3 (TensorFlow's InvalidArgumentError). */
public class InvalidArgumentError extends OpError {
  public InvalidArgumentError(String message) {
    super(3, message);
  }
}
