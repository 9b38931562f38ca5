package org.tpurt;

/** Status code 4 (TensorFlow's DeadlineExceededError). */
public class DeadlineExceededError extends OpError {
  public DeadlineExceededError(String message) {
    super(4, message);
  }
}
