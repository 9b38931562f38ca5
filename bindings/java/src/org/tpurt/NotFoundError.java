package org.tpurt;

/** Status code 5 (TensorFlow's NotFoundError). */
public class NotFoundError extends OpError {
  public NotFoundError(String message) {
    super(5, message);
  }
}
